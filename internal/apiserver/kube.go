// Debug access to an instance's Kubernetes API, the bastion's role: POST
// /v1/instances/NAME/kubeconfig issues a short-lived token for the proxy route
// /v1/instances/NAME/kube/, which forwards to the instance's API server with herd's own
// administrator credentials. The instance's API server is never exposed: only herd up reaches it.

package apiserver

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"time"

	"golang.org/x/net/http/httpguts"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/provider"
	"herd.dev/herd/internal/store"
)

// EventKubeconfigIssued is the reason of the event recorded on an instance for each kubeconfig
// issued for it.
const EventKubeconfigIssued = "KubeconfigIssued"

// KubeProxy is the TLS listener serving the API for the Kubernetes proxy route: kubectl sends
// a token only over TLS.
type KubeProxy struct {
	// URL is the listener's, e.g. https://127.0.0.1:41234.
	URL string
	// CAPEM is the CA that signed its serving certificate.
	CAPEM []byte
}

// KubeconfigResponse is what POST /v1/instances/NAME/kubeconfig returns: the client makes a
// kubeconfig of it whose server is Server, or when that is empty its own server URL followed by
// Path.
type KubeconfigResponse struct {
	Instance string `json:"instance"`
	// Path is the proxy route of the instance, e.g. /v1/instances/web-1/kube.
	Path string `json:"path"`
	// Server is the proxy route's URL on the TLS listener, and CAData the CA that listener's
	// certificate is signed by; empty when the API has no such listener.
	Server string `json:"server,omitempty"`
	CAData []byte `json:"caData,omitempty"`
	// Token is accepted on Path only, until ExpiresAt. Secret: shown once.
	Token     string    `json:"token"`
	ExpiresAt time.Time `json:"expiresAt"`
}

// KubePath returns the proxy route of instance name.
func KubePath(name string) string { return "/v1/instances/" + name + "/kube" }

// kubeRoute splits a path of the proxy route into the instance's name and the path to forward.
func kubeRoute(p string) (name, rest string, ok bool) {
	after, ok := strings.CutPrefix(p, "/v1/instances/")
	if !ok {
		return "", "", false
	}
	name, after, ok = strings.Cut(after, "/")
	if !ok || !provider.ValidName(name) {
		return "", "", false
	}
	if after != "kube" && !strings.HasPrefix(after, "kube/") {
		return "", "", false
	}
	rest = strings.TrimPrefix(after, "kube")
	if rest == "" {
		rest = "/"
	}
	return name, rest, true
}

// issueKubeconfig issues a token for the proxy route of an instance and records the issuance.
func (s *Server) issueKubeconfig(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	in, ok := s.instance(w, r, name)
	if !ok {
		return
	}
	if _, ok := s.opts.KubeAccess[in.Spec.Provider]; !ok {
		s.fail(w, r, http.StatusUnprocessableEntity, fmt.Errorf("instance %s runs on provider %s, which gives no access to a Kubernetes API", name, in.Spec.Provider))
		return
	}
	token, expires, err := s.kubeTokens.issue(name, s.opts.KubeTokenTTL)
	if err != nil {
		s.fail(w, r, http.StatusInternalServerError, fmt.Errorf("issue a token: %w", err))
		return
	}
	s.opts.Events.Eventf("Instance/"+name, v1alpha1.EventNormal, EventKubeconfigIssued,
		"kubeconfig issued for the instance's Kubernetes API through herd, valid until %s", expires.UTC().Format(time.RFC3339))
	s.log.Info("kubeconfig issued", "instance", name, "expires", expires)
	resp := KubeconfigResponse{Instance: name, Path: KubePath(name), Token: token, ExpiresAt: expires}
	if kp := s.opts.KubeProxy; kp != nil {
		resp.Server, resp.CAData = kp.URL+resp.Path, kp.CAPEM
	}
	writeJSON(w, http.StatusOK, resp)
}

// instance returns the stored instance called name, or answers 404 naming the fix.
func (s *Server) instance(w http.ResponseWriter, r *http.Request, name string) (*v1alpha1.Instance, bool) {
	in, err := store.GetObject[v1alpha1.Instance](r.Context(), s.opts.Store, store.Instances, name)
	if errors.Is(err, store.ErrNotFound) {
		s.fail(w, r, http.StatusNotFound, fmt.Errorf("instance %q not found: see herd get instances", name))
		return nil, false
	}
	if err != nil {
		s.storeError(w, r, "instance "+strconv.Quote(name), err)
		return nil, false
	}
	return in, true
}

// restConfig returns herd's administrator access to the instance's API server, or answers why
// there is none.
func (s *Server) restConfig(w http.ResponseWriter, r *http.Request, in *v1alpha1.Instance) (*rest.Config, bool) {
	name := in.Metadata.Name
	ka, ok := s.opts.KubeAccess[in.Spec.Provider]
	if !ok {
		s.fail(w, r, http.StatusUnprocessableEntity, fmt.Errorf("instance %s runs on provider %s, which gives no access to a Kubernetes API", name, in.Spec.Provider))
		return nil, false
	}
	kc, err := ka.Kubeconfig(r.Context(), name)
	switch {
	case errors.Is(err, provider.ErrNotFound):
		s.fail(w, r, http.StatusNotFound, fmt.Errorf("instance %s is gone from provider %s: see herd get instances", name, in.Spec.Provider))
		return nil, false
	case errors.Is(err, provider.ErrNoKubeAccess):
		s.fail(w, r, http.StatusServiceUnavailable, fmt.Errorf("instance %s (%s) has no Kubernetes API up yet: try again once herd get instances shows it Ready", name, in.Status.Phase))
		return nil, false
	case err != nil:
		s.fail(w, r, http.StatusBadGateway, fmt.Errorf("instance %s: %w", name, err))
		return nil, false
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(kc)
	if err != nil {
		s.fail(w, r, http.StatusBadGateway, fmt.Errorf("instance %s: its kubeconfig: %w", name, err))
		return nil, false
	}
	cfg.UserAgent = "herd"
	return cfg, true
}

// serveKube authenticates a request of the proxy route with a kube token and forwards it to the
// instance's API server. herd's own token is not accepted here, nor a kube token anywhere else.
func (s *Server) serveKube(w http.ResponseWriter, r *http.Request, name, path string) {
	token, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	switch s.kubeTokens.check(token, name) {
	case kubeTokenUnknown:
		http.Error(w, "Unauthorized: the kubeconfig's token is unknown or expired; get a new one with herd kubeconfig "+name, http.StatusUnauthorized)
		return
	case kubeTokenOtherInst:
		http.Error(w, "Forbidden: the kubeconfig's token is for another instance; get one with herd kubeconfig "+name, http.StatusForbidden)
		return
	}
	in, ok := s.instance(w, r, name)
	if !ok {
		return
	}
	cfg, ok := s.restConfig(w, r, in)
	if !ok {
		return
	}
	target, err := url.Parse(cfg.Host)
	if err != nil {
		s.fail(w, r, http.StatusBadGateway, fmt.Errorf("instance %s: API server URL: %w", name, err))
		return
	}
	// kubectl exec, attach and port-forward upgrade the connection: to websockets, or to SPDY
	// when kubectl falls back to it (an older kubectl, KUBECTL_*_WEBSOCKETS=false). The upgrade
	// needs HTTP/1.1 to the instance: client-go's transport would negotiate HTTP/2 with its API
	// server, over which Go's transport sends a websocket upgrade on HTTP/1.1 anyway but refuses
	// any other (the SPDY one failed with "invalid Upgrade request header").
	if httpguts.HeaderValuesContainsToken(r.Header["Connection"], "upgrade") {
		cfg = rest.CopyConfig(cfg)
		cfg.NextProtos = []string{"http/1.1"}
	}
	// TransportFor adds herd's credentials; client-go caches the TLS transport by config, so
	// connections to the instance are reused across requests.
	rt, err := rest.TransportFor(cfg)
	if err != nil {
		s.fail(w, r, http.StatusBadGateway, fmt.Errorf("instance %s: %w", name, err))
		return
	}
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme, pr.Out.URL.Host = target.Scheme, target.Host
			pr.Out.URL.Path, pr.Out.URL.RawPath = path, ""
			pr.Out.Host = target.Host
			// The caller's kube token must not reach the instance: the transport puts herd's
			// credentials only where no Authorization is set.
			pr.Out.Header.Del("Authorization")
		},
		Transport:     rt,
		FlushInterval: -1, // watches and log follows stream through
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if errors.Is(err, context.Canceled) {
				return
			}
			s.fail(w, r, http.StatusBadGateway, fmt.Errorf("instance %s: its Kubernetes API: %w", name, err))
		},
	}
	proxy.ServeHTTP(w, r)
}
