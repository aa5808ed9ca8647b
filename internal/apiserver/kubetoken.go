// Short-lived tokens of the Kubernetes proxy route: what a kubeconfig from `herd kubeconfig`
// carries instead of herd's own token.

package apiserver

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// DefaultKubeTokenTTL is how long a kubeconfig issued by the API stays valid.
const DefaultKubeTokenTTL = time.Hour

// kubeTokenPrefix marks herd's kube tokens, so that one found in a file or a log is recognised.
const kubeTokenPrefix = "herdkube_"

// kubeTokens are the kube tokens issued and not yet expired. Only a token's SHA-256 is kept: a
// token is never stored, logged or shown again after it is issued. They live in memory, so a
// restart of herd up revokes them all (a user then gets a new kubeconfig).
type kubeTokens struct {
	clock  clock.PassiveClock
	mu     sync.Mutex
	byHash map[[sha256.Size]byte]kubeGrant
}

// kubeGrant is what a token grants: the proxy route of one instance until it expires.
type kubeGrant struct {
	instance string
	expires  time.Time
}

func newKubeTokens(c clock.PassiveClock) *kubeTokens {
	return &kubeTokens{clock: c, byHash: map[[sha256.Size]byte]kubeGrant{}}
}

// issue returns a new random token for instance, valid for ttl, and when it expires.
func (k *kubeTokens) issue(instance string, ttl time.Duration) (string, time.Time, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", time.Time{}, err
	}
	token := kubeTokenPrefix + hex.EncodeToString(b)
	now := k.clock.Now()
	expires := now.Add(ttl)
	k.mu.Lock()
	defer k.mu.Unlock()
	for h, g := range k.byHash { // forget the expired ones; few are alive at a time
		if !now.Before(g.expires) {
			delete(k.byHash, h)
		}
	}
	k.byHash[sha256.Sum256([]byte(token))] = kubeGrant{instance: instance, expires: expires}
	return token, expires, nil
}

// kubeTokenCheck is the verdict on a token presented for an instance.
type kubeTokenCheck int

const (
	kubeTokenOK        kubeTokenCheck = iota
	kubeTokenUnknown                  // never issued, or expired: 401
	kubeTokenOtherInst                // valid, for another instance: 403
)

// check says whether token grants access to instance now. The lookup is by the token's hash, so
// its time does not depend on how much of a guess matches.
func (k *kubeTokens) check(token, instance string) kubeTokenCheck {
	h := sha256.Sum256([]byte(token))
	k.mu.Lock()
	g, ok := k.byHash[h]
	k.mu.Unlock()
	switch {
	case !ok || !k.clock.Now().Before(g.expires):
		return kubeTokenUnknown
	case g.instance != instance:
		return kubeTokenOtherInst
	}
	return kubeTokenOK
}
