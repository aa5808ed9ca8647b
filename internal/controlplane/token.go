package controlplane

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"herd.dev/herd/internal/store"
	"herd.dev/herd/internal/store/etcd"
)

// The API token: one per control plane, so that a client config works with every replica.
const (
	// kindConfig holds the control plane's own settings on a shared store; never served by the API.
	kindConfig = "config"
	tokenName  = "api-token"
)

// tokenFile is where a person finds the API token: the data directory's token file, except under
// a shared etcd store, where the token of the replicas is in etcd and may be another replica's
// (the client config has it either way).
func tokenFile(st store.Store, dataDir string) string {
	if _, shared := st.(*etcd.Store); shared {
		return ""
	}
	return filepath.Join(dataDir, "token")
}

// apiToken returns the API's token. On bolt it is the file at path, made on first start. On etcd
// it is kept in etcd, so that every replica serves the same one: the first replica stores its
// file's token (made if missing, so that a client config written before keeps working), the
// others read it. Anyone who can read herd's keys in etcd can read it, as they could every record.
func apiToken(ctx context.Context, st store.Store, path string) (string, error) {
	if _, shared := st.(*etcd.Store); !shared {
		return loadOrCreateToken(path)
	}
	for range 2 {
		rec, err := st.Get(ctx, kindConfig, tokenName)
		if err == nil {
			var t string
			if err := json.Unmarshal(rec.Value, &t); err != nil || len(t) < 32 {
				return "", fmt.Errorf("the API token stored in etcd (%s/%s) is unreadable: delete the key and restart herd up", kindConfig, tokenName)
			}
			return t, nil
		}
		if !errors.Is(err, store.ErrNotFound) {
			return "", fmt.Errorf("read the API token from the store: %w", err)
		}
		t, err := loadOrCreateToken(path)
		if err != nil {
			return "", err
		}
		v, _ := json.Marshal(t)
		if _, err := store.Create(ctx, st, kindConfig, tokenName, v); err == nil {
			return t, nil
		} else if !errors.Is(err, store.ErrExists) {
			return "", fmt.Errorf("store the API token: %w", err)
		}
		// Another replica stored its token first: read that one.
	}
	return "", errors.New("store the API token: it keeps changing in etcd")
}

// loadOrCreateToken returns the API token, generating it (mode 0600) on first start so that it
// stays the same across restarts and existing client configs keep working.
func loadOrCreateToken(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err == nil {
		if t := strings.TrimSpace(string(data)); len(t) >= 32 {
			return t, nil
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("read token: %w", err)
	}
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	t := hex.EncodeToString(b)
	if err := os.WriteFile(path, []byte(t+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("write token: %w", err)
	}
	return t, nil
}
