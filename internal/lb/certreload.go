package lb

import (
	"context"
	"crypto/tls"
	"os"
	"time"
)

// This file re-reads TLS listeners' certificates when their files change, so that a renewed
// certificate (cert-manager, certbot, a herd local CA reissue) is served without an Apply: the next
// handshake after the change gets the new one. A pair that does not load (a renewal half written:
// the new certificate beside the old key) is tried again on the next change and the listener keeps
// its working certificate meanwhile.

// certReloadEvery is how often the certificate files are checked: one stat of each per listener.
const certReloadEvery = time.Second

// certStamp identifies a version of a certificate pair on disk.
type certStamp struct {
	certMod, keyMod   time.Time
	certSize, keySize int64
}

func stampOf(t *TLS) (certStamp, bool) {
	c, err1 := os.Stat(t.CertFile)
	k, err2 := os.Stat(t.KeyFile)
	if err1 != nil || err2 != nil {
		return certStamp{}, false
	}
	return certStamp{certMod: c.ModTime(), keyMod: k.ModTime(), certSize: c.Size(), keySize: k.Size()}, true
}

// reloadCerts checks the TLS listeners' certificate files every certReloadEvery until ctx is
// done, and loads the pairs that changed.
func (lb *LB) reloadCerts(ctx context.Context) {
	seen := map[string]certStamp{} // by listener name
	t := time.NewTicker(certReloadEvery)
	defer t.Stop()
	for {
		lb.reloadChangedCerts(seen)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// reloadChangedCerts loads the certificate of every TLS listener whose files changed since seen
// recorded them (the first look only records).
func (lb *LB) reloadChangedCerts(seen map[string]certStamp) {
	lb.mu.Lock()
	listeners := lb.allListeners()
	lb.mu.Unlock()
	live := map[string]bool{}
	for _, l := range listeners {
		st := l.state.Load()
		if st == nil || st.cfg.TLS == nil {
			continue
		}
		live[l.name] = true
		stamp, ok := stampOf(st.cfg.TLS)
		if !ok {
			continue
		}
		before, known := seen[l.name]
		seen[l.name] = stamp
		if !known || before == stamp {
			continue
		}
		c, err := tls.LoadX509KeyPair(st.cfg.TLS.CertFile, st.cfg.TLS.KeyFile)
		if err != nil {
			l.log.Warn("changed certificate does not load; keeping the one served", "cert_file", st.cfg.TLS.CertFile, "error", err)
			continue
		}
		l.cert.Store(&c)
		l.log.Info("certificate reloaded", "cert_file", st.cfg.TLS.CertFile)
	}
	for name := range seen {
		if !live[name] {
			delete(seen, name)
		}
	}
}
