// Logs and debug access to instances: their pods' logs, and kubeconfigs for the Kubernetes proxy
// route of herd up's API.

package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"herd.dev/herd/internal/apiserver"
)

// Logs calls fn with each line of the instance's pods' logs that q selects, until the log ends
// (with q.Follow: until ctx ends or the instance is deleted, then it returns nil).
func (c *Client) Logs(ctx context.Context, instance string, q apiserver.LogQuery, fn func(apiserver.LogLine)) error {
	var bad error
	err := c.stream(ctx, "/v1/instances/"+url.PathEscape(instance)+"/logs?"+url.Values(q.Values()).Encode(), func(line []byte) bool {
		var l apiserver.LogLine
		if err := json.Unmarshal(line, &l); err != nil {
			bad = fmt.Errorf("logs of %s: unreadable line %q", instance, line)
			return true
		}
		fn(l)
		return false
	})
	switch {
	case bad != nil:
		return bad
	case ctx.Err() != nil:
		return nil
	}
	return err
}

// IssueKubeconfig asks for a short-lived token of the instance's Kubernetes proxy route.
func (c *Client) IssueKubeconfig(ctx context.Context, instance string) (*apiserver.KubeconfigResponse, error) {
	var out apiserver.KubeconfigResponse
	if err := c.do(ctx, http.MethodPost, "/v1/instances/"+url.PathEscape(instance)+"/kubeconfig", nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Kubeconfig renders a kubeconfig for an issued token: its server is the proxy route on the
// control plane's TLS listener (or on this client's server when it has none). It holds a secret:
// write it mode 0600.
func (c *Client) Kubeconfig(kr *apiserver.KubeconfigResponse) ([]byte, error) {
	name := "herd-" + kr.Instance
	cfg := clientcmdapi.NewConfig()
	cluster := &clientcmdapi.Cluster{Server: kr.Server, CertificateAuthorityData: kr.CAData}
	if kr.Server == "" {
		cluster.Server = strings.TrimRight(c.cfg.Server, "/") + kr.Path
	}
	cfg.Clusters[name] = cluster
	cfg.AuthInfos[name] = &clientcmdapi.AuthInfo{Token: kr.Token}
	cfg.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: name, Namespace: "default"}
	cfg.CurrentContext = name
	return clientcmd.Write(*cfg)
}
