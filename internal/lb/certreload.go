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
	t := time.NewTicker(certReloadEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		lb.reloadChangedCerts()
	}
}

// reloadChangedCerts loads the certificate of every TLS listener whose files changed since they
// were last looked at: by Apply, which loaded them, or by an earlier call.
func (lb *LB) reloadChangedCerts() {
	lb.mu.Lock()
	listeners := lb.allListeners()
	lb.mu.Unlock()
	for _, l := range listeners {
		st := l.state.Load()
		if st == nil || st.cfg.TLS == nil {
			continue
		}
		stamp, ok := stampOf(st.cfg.TLS)
		if !ok {
			continue
		}
		if before := l.certSeen.Swap(&stamp); before != nil && *before == stamp {
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
}
