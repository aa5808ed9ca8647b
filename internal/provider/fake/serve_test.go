package fake

import (
	"context"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"herd.dev/herd/internal/provider"
)

// TestServe: with the serve option an instance answers HTTP on its address, 503 while it boots,
// 200 with its name once Ready, 503 again once it failed, and nothing once deleted.
func TestServe(t *testing.T) {
	var now atomic.Int64
	now.Store(time.Now().UnixNano())
	p, err := New(Options{BootDelay: time.Minute, Now: func() time.Time { return time.Unix(0, now.Load()) }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	// The first instance's address is 127.1.0.1: find a free port there.
	ln, err := net.Listen("tcp", "127.1.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	ln.Close()
	ctx := context.Background()
	in, err := p.Create(ctx, provider.InstanceSpec{Name: "web-abcde", Image: "sha256:abc", Region: "local",
		Labels: map[string]string{"herd.dev/fleet": "web"}, Options: map[string]string{optServe: port}})
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + net.JoinHostPort(in.Address, port) + "/healthz"
	client := &http.Client{Timeout: 5 * time.Second}
	get := func() (int, string, error) {
		resp, err := client.Get(url)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), nil
	}
	if code, body, err := get(); err != nil || code != http.StatusServiceUnavailable {
		t.Fatalf("booting: %d %q %v, want 503", code, body, err)
	}
	now.Add(int64(time.Minute))
	if code, body, err := get(); err != nil || code != http.StatusOK || !strings.Contains(body, "hello from web-abcde") {
		t.Fatalf("ready: %d %q %v, want 200 and the instance's name", code, body, err)
	}
	if err := p.Kill("web-abcde", "machine lost"); err != nil {
		t.Fatal(err)
	}
	if code, body, err := get(); err != nil || code != http.StatusServiceUnavailable || !strings.Contains(body, "machine lost") {
		t.Fatalf("failed: %d %q %v, want 503 with the reason", code, body, err)
	}
	if err := p.Delete(ctx, "web-abcde"); err != nil {
		t.Fatal(err)
	}
	client.CloseIdleConnections()
	if code, body, err := get(); err == nil {
		t.Fatalf("deleted: %d %q, want no answer", code, body)
	}
}

// TestServeTakenPort: an instance that cannot bind its port fails, saying why.
func TestServeTakenPort(t *testing.T) {
	ln, err := net.Listen("tcp", "127.1.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	p, _ := New(Options{})
	t.Cleanup(func() { p.Close() })
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	in, err := p.Create(context.Background(), provider.InstanceSpec{Name: "web-abcde", Image: "sha256:abc",
		Labels: map[string]string{"herd.dev/fleet": "web"}, Options: map[string]string{optServe: port}})
	if err != nil || in.State != provider.StateFailed || !strings.Contains(in.Reason, "127.1.0.1:"+port) {
		t.Fatalf("instance on a taken port: %+v %v, want Failed naming the address", in, err)
	}
}

func TestServeOptionValidated(t *testing.T) {
	p, _ := New(Options{})
	path := field.NewPath("spec", "regions").Index(0).Child("options")
	if errs := p.ValidateOptions(path, map[string]string{optServe: "30080, 30081"}); len(errs) != 0 {
		t.Errorf("two ports: %v", errs)
	}
	for _, bad := range []string{"", "http", "0", "70000", "30080,"} {
		errs := p.ValidateOptions(path, map[string]string{optServe: bad})
		if len(errs) != 1 || errs[0].Field != "spec.regions[0].options.serve" {
			t.Errorf("serve %q: %v, want one error on spec.regions[0].options.serve", bad, errs)
		}
	}
}
