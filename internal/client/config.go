// Package client is the Go client of herd's control-plane API, and the client config file that
// `herd up` writes and the CLI reads (like a kubeconfig: where the API is and the token for it).
package client

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"sigs.k8s.io/yaml"
)

// Config is the client config file.
type Config struct {
	// Server is the API's base URL, e.g. http://127.0.0.1:7443.
	Server string `json:"server"`
	// Token is the bearer token. The file holding it is mode 0600.
	Token string `json:"token"`
}

// DefaultConfigPath is $HERD_CONFIG, or $XDG_CONFIG_HOME/herd/config, or ~/.config/herd/config.
func DefaultConfigPath() string {
	if p := os.Getenv("HERD_CONFIG"); p != "" {
		return p
	}
	dir := os.Getenv("XDG_CONFIG_HOME")
	if dir == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			home = "."
		}
		dir = filepath.Join(home, ".config")
	}
	return filepath.Join(dir, "herd", "config")
}

// ErrNoConfig means no control plane has written a client config yet.
var ErrNoConfig = errors.New("no herd client config")

// LoadConfig reads a client config.
func LoadConfig(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w at %s: start the control plane with `herd up` (it writes this file), or point --config at another one", ErrNoConfig, path)
	}
	if err != nil {
		return nil, fmt.Errorf("read client config: %w", err)
	}
	var c Config
	if err := yaml.UnmarshalStrict(data, &c); err != nil {
		return nil, fmt.Errorf("client config %s: %w", path, err)
	}
	if c.Server == "" || c.Token == "" {
		return nil, fmt.Errorf("client config %s: server and token are required; `herd up` rewrites it", path)
	}
	return &c, nil
}

// SaveConfig writes a client config atomically, mode 0600, in a 0700 directory.
func SaveConfig(path string, c *Config) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("write client config: %w", err)
	}
	data, err := yaml.Marshal(c)
	if err != nil {
		return err
	}
	if err := WriteSecretFile(path, data); err != nil {
		return fmt.Errorf("write client config: %w", err)
	}
	return nil
}

// WriteSecretFile writes data to path atomically (a temporary file renamed over it), mode 0600
// whatever the umask and whatever mode a file already there had: for files holding credentials.
func WriteSecretFile(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	if err := os.Chmod(tmp, 0o600); err != nil {
		os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}
