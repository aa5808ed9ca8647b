// Package agentauth is how herd up and each instance's agent authenticate each other on the
// agent's port: with a credential of that one instance, a secret both hold and nobody else does.
//
// herd up derives every instance's credential from a key of its own (<data-dir>/agent-key, mode
// 0600, made once), so that a restarted herd up, or another replica on the same data directory,
// has the credentials of the instances it adopts without keeping them. The provider hands the
// credential to the instance when it creates it (the local provider in a file of the instance, the
// aws provider in the instance's user data); an instance knows its own credential only.
//
// herd up sends the credential as a bearer token, which proves herd up to the agent; with it a
// random nonce, which the agent answers with an HMAC of the nonce under the credential, which
// proves the agent to herd up (an address reused by another machine cannot pass for the
// instance). The agent refuses every request without the credential with 401.
package agentauth

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
)

// Headers of the exchange.
const (
	// NonceHeader carries herd up's random nonce.
	NonceHeader = "Herd-Agent-Nonce"
	// ProofHeader carries the agent's HMAC-SHA256 of the nonce under the credential, in hex.
	ProofHeader = "Herd-Agent-Proof"
)

// KeyFile is the name of herd up's key in its data directory.
const KeyFile = "agent-key"

// Keyring derives the instances' credentials from herd up's key.
type Keyring struct{ key []byte }

// NewKeyring returns a keyring of key (at least 32 bytes), for tests and callers that keep the key
// elsewhere.
func NewKeyring(key []byte) (*Keyring, error) {
	if len(key) < 32 {
		return nil, fmt.Errorf("agentauth: a key of %d bytes is too short: want at least 32", len(key))
	}
	return &Keyring{key: append([]byte(nil), key...)}, nil
}

// Open returns the keyring of the key in dataDir, making the key if there is none. Processes that
// open one data directory at once all get the key that was made first.
func Open(dataDir string) (*Keyring, error) {
	path := filepath.Join(dataDir, KeyFile)
	if k, err := read(path); err == nil || !errors.Is(err, fs.ErrNotExist) {
		return k, err
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return nil, fmt.Errorf("agentauth: %w", err)
	}
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("agentauth: %w", err)
	}
	tmp, err := os.CreateTemp(dataDir, KeyFile+".*")
	if err != nil {
		return nil, fmt.Errorf("agentauth: %w", err)
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.WriteString(hex.EncodeToString(key) + "\n")
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("agentauth: write %s: %w", path, err)
	}
	// A link fails when the key exists: whoever linked first made the key everyone uses.
	if err := os.Link(tmp.Name(), path); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, fmt.Errorf("agentauth: write %s: %w", path, err)
	}
	return read(path)
}

func read(path string) (*Keyring, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	key, err := hex.DecodeString(strings.TrimSpace(string(b)))
	if err != nil {
		return nil, fmt.Errorf("agentauth: %s is not a hex key: remove it to make a new one (running instances then need their credentials again): %w", path, err)
	}
	return NewKeyring(key)
}

// Credential is the credential of the instance called name.
func (k *Keyring) Credential(name string) string {
	return mac(k.key, "herd agent credential\x00"+name)
}

func mac(key []byte, msg string) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(msg))
	return hex.EncodeToString(m.Sum(nil))
}

// Require serves h only to requests that carry credential, and answers each one's nonce with its
// proof. Every other request is refused with 401.
func Require(credential string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if credential == "" || !ok || !hmac.Equal([]byte(token), []byte(credential)) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="herd-agent"`)
			http.Error(w, "this instance's credential is required", http.StatusUnauthorized)
			return
		}
		if n := r.Header.Get(NonceHeader); n != "" {
			w.Header().Set(ProofHeader, mac([]byte(credential), n))
		}
		h.ServeHTTP(w, r)
	})
}

// Authorize adds credential and a fresh nonce to req, and returns the check of the answer: it
// fails unless the answer proves that its sender holds the credential too.
func Authorize(req *http.Request, credential string) (verify func(*http.Response) error) {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	nonce := hex.EncodeToString(b)
	req.Header.Set("Authorization", "Bearer "+credential)
	req.Header.Set(NonceHeader, nonce)
	return func(resp *http.Response) error {
		if resp.StatusCode == http.StatusUnauthorized {
			return errors.New("the agent refused the instance's credential")
		}
		want := mac([]byte(credential), nonce)
		if !hmac.Equal([]byte(resp.Header.Get(ProofHeader)), []byte(want)) {
			return errors.New("the answer does not prove the instance's credential: not this instance's agent")
		}
		return nil
	}
}

// WriteCredentialFile writes an instance's credential where its agent reads it (mode 0600).
func WriteCredentialFile(path, credential string) error {
	if err := os.WriteFile(path, []byte(credential+"\n"), 0o600); err != nil {
		return fmt.Errorf("agentauth: write the instance's credential: %w", err)
	}
	return nil
}

// ReadCredentialFile reads a credential written by WriteCredentialFile.
func ReadCredentialFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("read the instance's credential: %w", err)
	}
	c := strings.TrimSpace(string(b))
	if c == "" {
		return "", fmt.Errorf("%s holds no credential", path)
	}
	return c, nil
}

// ID names the key, and so the herd installation that holds it, without revealing it: 16 hex
// digits, the same for every process that opens the same data directory.
func (k *Keyring) ID() string {
	return mac(k.key, "herd installation")[:16]
}
