package fake

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"herd.dev/herd/internal/provider"
)

// optServe is the region option that makes fake instances answer HTTP: a comma-separated list of
// ports (a fleet's listeners' instancePorts). Each instance listens on its own loopback address
// at each of them, so that the load balancer's health checks and the traffic it sends reach
// something real: 200 with the instance's name on every path once the instance is Ready, 503
// while it boots or after it failed. Without it a fake instance answers nothing, and a fleet with
// listeners never passes its health check.
const optServe = "serve"

// servePorts parses the serve option.
func servePorts(v string) ([]int, error) {
	var ports []int
	for _, s := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 || n > 65535 {
			return nil, fmt.Errorf("%q is not a port from 1 to 65535", s)
		}
		ports = append(ports, n)
	}
	return ports, nil
}

func validateServe(path *field.Path, opts map[string]string) field.ErrorList {
	v, ok := opts[optServe]
	if !ok {
		return nil
	}
	if _, err := servePorts(v); err != nil {
		return field.ErrorList{field.Invalid(path.Child(optServe), v, "must list the ports fake instances answer HTTP on, such as \"30080\" or \"30080,30081\": "+err.Error())}
	}
	return nil
}

// serve starts r's HTTP servers, if its region asks for them. A port that cannot be bound fails
// the instance with the reason, as a real instance whose workload cannot start does. p.mu must
// be held.
func (p *Provider) serve(r *record) {
	v, ok := r.Spec.Options[optServe]
	if !ok {
		return
	}
	ports, err := servePorts(v)
	if err != nil {
		r.serveErr = "serve: " + err.Error()
		return
	}
	name := r.Spec.Name
	for _, port := range ports {
		addr := net.JoinHostPort(r.Address, strconv.Itoa(port))
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			r.serveErr = fmt.Sprintf("serve on %s: %v", addr, err)
			p.stopServing(r)
			return
		}
		srv := &http.Server{Handler: p.answer(name), ReadHeaderTimeout: 5 * time.Second}
		r.servers = append(r.servers, srv)
		go func() {
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				p.mu.Lock()
				r.serveErr = fmt.Sprintf("serve on %s: %v", addr, err)
				p.mu.Unlock()
			}
		}()
	}
}

// stopServing closes r's servers. p.mu must be held.
func (p *Provider) stopServing(r *record) {
	for _, srv := range r.servers {
		_ = srv.Close()
	}
	r.servers = nil
}

// answer is what instance name answers on every path: its name once Ready, 503 before and
// after.
func (p *Provider) answer(name string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		p.mu.Lock()
		r, ok := p.instances[name]
		var in provider.Instance
		if ok {
			in = p.view(r)
		}
		p.mu.Unlock()
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		switch {
		case !ok:
			http.Error(w, name+" was deleted", http.StatusServiceUnavailable)
		case in.State != provider.StateReady:
			http.Error(w, fmt.Sprintf("%s is %s %s", name, in.State, in.Reason), http.StatusServiceUnavailable)
		default:
			fmt.Fprintf(w, "hello from %s, a fake instance in region %s\n", name, in.Region)
		}
	})
}

// Close stops every instance's HTTP servers (the serve option). The instances are kept.
func (p *Provider) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, r := range p.instances {
		p.stopServing(r)
	}
	return nil
}
