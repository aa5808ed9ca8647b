// Package client is the Go client of herd's control-plane API, and the client config file that
// `herd up` writes and the CLI reads (like a kubeconfig: where the API is and the token for it).
package client

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"sigs.k8s.io/yaml"
)

// Config is the client config file.
type Config struct {
	// Server is the API's base URL, e.g. http://127.0.0.1:7443: the first of Servers. Configs
	// written before Servers existed have only this.
	Server string `json:"server"`
	// Servers are the base URLs of every replica of the control plane (herd up on a shared etcd);
	// the client tries them in turn when one does not answer. Default: [Server].
	Servers []string `json:"servers,omitempty"`
	// Token is the bearer token. The file holding it is mode 0600.
	Token string `json:"token"`
}

// Endpoints returns the servers the client may use, in order, without repeats.
func (c *Config) Endpoints() []string {
	var out []string
	seen := map[string]bool{}
	for _, s := range append([]string{c.Server}, c.Servers...) {
		if s != "" && !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
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
	if len(c.Endpoints()) == 0 || c.Token == "" {
		return nil, fmt.Errorf("client config %s: server (or servers) and token are required; `herd up` rewrites it", path)
	}
	if c.Server == "" {
		c.Server = c.Servers[0]
	}
	return &c, nil
}

// AddServer records that the control plane with token serves at server: it writes a config with
// server alone, unless the file already holds a config with the same token (another replica of
// the same control plane), whose servers it keeps, adding server to them.
func AddServer(path, server, token string) error {
	c := &Config{Server: server, Token: token}
	if old, err := LoadConfig(path); err == nil && old.Token == token {
		c.Server = old.Server
		c.Servers = old.Endpoints()
		if !slices.Contains(c.Servers, server) {
			c.Servers = append(c.Servers, server)
		}
		if len(c.Servers) == 1 {
			c.Servers = nil
		}
	}
	return SaveConfig(path, c)
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
