// Command handshakes makes TLS connections as fast as -conns workers can, each connection carrying
// one HTTP/1.1 GET with "Connection: close", and prints how many completed per second and what was
// negotiated. It measures a TLS server's new-handshake rate with the work of each handshake fixed by
// the client, the same for every server it is pointed at:
//   - full handshakes only: no session is kept, so none is resumed (wrk keeps each connection's
//     session and resumes it on the next one, which measures resumption, and a TLS 1.2 resumption
//     has no key exchange at all); with -resume each worker resumes its last session instead;
//   - the key-exchange groups offered are -groups, in that order, a key share sent for the first
//     (Go's client offers the hybrid X25519MLKEM768 first by default, which a server on OpenSSL 3.0
//     cannot choose and Go's server prefers, so the default offer is not the same work for all).
//
// Output is one line of key=value pairs; negotiated lists each distinct version, group, cipher suite,
// certificate key and ALPN protocol seen, with its count, so that a run shows the work it measured.
package main

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:18190", "host:port of the TLS server")
	duration := flag.Duration("duration", 10*time.Second, "measured time")
	conns := flag.Int("conns", 64, "concurrent workers, each one connection at a time")
	groups := flag.String("groups", "X25519", "key-exchange groups offered, comma-separated, most preferred first (Go's names: X25519, X25519MLKEM768, CurveP256, ...)")
	resume := flag.Bool("resume", false, "resume each worker's last session instead of making full handshakes")
	flag.Parse()
	curves, err := parseGroups(*groups)
	if err == nil && *conns <= 0 {
		err = errors.New("-conns must be positive")
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "handshakes:", err)
		os.Exit(2)
	}
	if err := run(*addr, curves, *resume, *duration, *conns); err != nil {
		fmt.Fprintln(os.Stderr, "handshakes:", err)
		os.Exit(1)
	}
}

// parseGroups maps Go's names of key-exchange groups to their ids.
func parseGroups(s string) ([]tls.CurveID, error) {
	known := []tls.CurveID{tls.X25519MLKEM768, tls.SecP256r1MLKEM768, tls.SecP384r1MLKEM1024,
		tls.X25519, tls.CurveP256, tls.CurveP384, tls.CurveP521}
	var ids []tls.CurveID
	for name := range strings.SplitSeq(s, ",") {
		i := slices.IndexFunc(known, func(id tls.CurveID) bool { return id.String() == strings.TrimSpace(name) })
		if i < 0 {
			return nil, fmt.Errorf("-groups: unknown group %q; use Go's names, e.g. X25519,X25519MLKEM768", name)
		}
		ids = append(ids, known[i])
	}
	return ids, nil
}

// tally counts handshakes by what they negotiated.
type tally struct {
	mu       sync.Mutex
	ok, errs int
	resumed  int
	seen     map[string]int
	firstErr error
}

func (t *tally) add(st *tls.ConnectionState, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err != nil {
		t.errs++
		if t.firstErr == nil {
			t.firstErr = err
		}
		return
	}
	t.ok++
	if st.DidResume {
		t.resumed++
	}
	t.seen[negotiated(st)]++
}

// negotiated names what a session was made with: version/group/cipher/certificate key/ALPN.
func negotiated(st *tls.ConnectionState) string {
	cert := "none"
	if len(st.PeerCertificates) > 0 {
		switch k := st.PeerCertificates[0].PublicKey.(type) {
		case *ecdsa.PublicKey:
			cert = "ECDSA-" + k.Curve.Params().Name
		case *rsa.PublicKey:
			cert = fmt.Sprintf("RSA-%d", k.N.BitLen())
		case ed25519.PublicKey:
			cert = "Ed25519"
		}
	}
	group := st.CurveID.String()
	if st.CurveID == 0 {
		group = "none"
	}
	return strings.Join([]string{tls.VersionName(st.Version), group, tls.CipherSuiteName(st.CipherSuite), cert,
		st.NegotiatedProtocol}, "/")
}

func run(addr string, curves []tls.CurveID, resume bool, duration time.Duration, conns int) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("-addr: %w", err)
	}
	req := []byte("GET / HTTP/1.1\r\nHost: " + addr + "\r\nUser-Agent: herd-handshakes\r\nConnection: close\r\n\r\n")
	t := &tally{seen: map[string]int{}}
	end := time.Now().Add(duration)
	var wg sync.WaitGroup
	for range conns {
		wg.Go(func() {
			cfg := &tls.Config{
				// The benchmark's certificate is made for the run: what is measured is the server's
				// handshake, and the client verifies its signature over the handshake all the same.
				InsecureSkipVerify: true,
				ServerName:         host,
				CurvePreferences:   curves,
				NextProtos:         []string{"http/1.1"},
			}
			if resume {
				cfg.ClientSessionCache = tls.NewLRUClientSessionCache(1)
			}
			for time.Now().Before(end) {
				st, err := once(addr, cfg, req)
				if time.Now().Before(end) {
					t.add(st, err)
				}
			}
		})
	}
	wg.Wait()
	if t.ok == 0 {
		return fmt.Errorf("no handshake succeeded (%d errors, the first: %v)", t.errs, t.firstErr)
	}
	var seen []string
	for k, n := range t.seen {
		seen = append(seen, fmt.Sprintf("%s:%d", k, n))
	}
	slices.Sort(seen)
	fmt.Printf("handshakes_per_s=%.0f ok=%d errors=%d resumed=%d negotiated=%s\n",
		float64(t.ok)/duration.Seconds(), t.ok, t.errs, t.resumed, strings.Join(seen, ","))
	return nil
}

// once makes one TLS connection, sends req over it, reads the response and closes it.
func once(addr string, cfg *tls.Config, req []byte) (*tls.ConnectionState, error) {
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	tc := tls.Client(c, cfg)
	if err := tc.Handshake(); err != nil {
		return nil, err
	}
	if _, err := tc.Write(req); err != nil {
		return nil, err
	}
	resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
	if err != nil {
		return nil, err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("status %s", resp.Status)
	}
	st := tc.ConnectionState()
	return &st, err
}
