// The agent's own requests to the API server, counted by verb and resource: its part of an idle
// instance's work, which the API server's metrics cannot tell from the administrator's.

package agent

import (
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// apiCalls counts the requests a transport sends, by verb and resource.
type apiCalls struct{ total *prometheus.CounterVec }

func newAPICalls() apiCalls {
	return apiCalls{prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "herd_agent_api_requests_total",
		Help: "Requests the agent sent to the cluster's API server, by verb and resource.",
	}, []string{"verb", "resource"})}
}

// wrap counts every request rt sends (rest.Config.WrapTransport).
func (c apiCalls) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		verb, resource := requestKind(r)
		c.total.WithLabelValues(verb, resource).Inc()
		return rt.RoundTrip(r)
	})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// requestKind names a request to the API server as its audit log would: a verb (get, list,
// watch, create, update, patch, delete) and a resource, with its subresource after a slash.
// Paths outside the API groups (/healthz, /version) are their own resource.
func requestKind(r *http.Request) (verb, resource string) {
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	var rest []string
	switch {
	case len(parts) >= 2 && parts[0] == "api":
		rest = parts[2:]
	case len(parts) >= 3 && parts[0] == "apis":
		rest = parts[3:]
	default:
		return strings.ToLower(r.Method), "/" + strings.Join(parts, "/")
	}
	if len(rest) >= 3 && rest[0] == "namespaces" {
		rest = rest[2:]
	}
	named := len(rest) >= 2
	if len(rest) > 0 {
		resource = rest[0]
	}
	if len(rest) >= 3 {
		resource += "/" + rest[2]
	}
	switch r.Method {
	case http.MethodGet:
		switch {
		case r.URL.Query().Get("watch") == "true" || r.URL.Query().Get("watch") == "1":
			verb = "watch"
		case named:
			verb = "get"
		default:
			verb = "list"
		}
	case http.MethodPost:
		verb = "create"
	case http.MethodPut:
		verb = "update"
	default:
		verb = strings.ToLower(r.Method)
	}
	return verb, resource
}
