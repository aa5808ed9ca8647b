// Control planes reached over a unix socket (`herd up --api-socket`): a server URL
// unix:///path/to/api.sock.

package client

import (
	"context"
	"fmt"
	"hash/fnv"
	"net"
	"net/http"
	"strings"
	"sync"
)

// unixScheme starts the server URL of a control plane's unix socket.
const unixScheme = "unix://"

// unixSockets maps the made-up host names of socket URLs to their socket paths, for the dialer.
var unixSockets sync.Map

// baseURL is the HTTP base URL requests to server go to: server itself, or for a unix socket an
// http URL on a host name standing for the socket (one per path, so that connections to two
// sockets are never pooled together).
func baseURL(server string) string {
	sock, ok := strings.CutPrefix(server, unixScheme)
	if !ok {
		return strings.TrimRight(server, "/")
	}
	h := fnv.New64a()
	h.Write([]byte(sock))
	host := fmt.Sprintf("unix-%x.herd.invalid", h.Sum64())
	unixSockets.Store(host, sock)
	return "http://" + host
}

// newTransport is net/http's default transport, dialing the socket for a socket's host name.
func newTransport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	var d net.Dialer
	t.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, _, err := net.SplitHostPort(addr)
		if err == nil {
			if sock, ok := unixSockets.Load(host); ok {
				return d.DialContext(ctx, "unix", sock.(string))
			}
		}
		return d.DialContext(ctx, network, addr)
	}
	return t
}

// transport is shared by every client of the process, as http.DefaultTransport would be.
var transport = newTransport()
