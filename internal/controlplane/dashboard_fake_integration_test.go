package controlplane_test

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"herd.dev/herd/internal/provider/fake"
	bt "herd.dev/herd/internal/web/browsertest"
)

// TestIntegrationDashboardFakeExample applies examples/fleet-fake.yaml to herd up on the fake
// provider and looks at it as a new user does: the login form names this herd up's token file,
// and the fleet becomes healthy for real: Ready with every condition good, its instances healthy
// in the load balancer and answering through it. Screenshots of each page, wide and narrow, go
// to the test's artifacts.
func TestIntegrationDashboardFakeExample(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	p, err := fake.New(fake.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	c, token, cl := dashboardCluster(t, p)
	base := "http://" + c.addr
	example, err := os.ReadFile("../../examples/fleet-fake.yaml")
	if err != nil {
		t.Fatal(err)
	}
	// The example's load-balancer port may be taken on this machine: take a free one.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	manifest := strings.Replace(string(example), "{port: 8080,", fmt.Sprintf("{port: %d,", port), 1)
	if manifest == string(example) {
		t.Fatal("examples/fleet-fake.yaml has no listener on port 8080 any more: update this test")
	}

	ctx := bt.New(t)
	bt.Run(t, ctx, 20*time.Second, "open the login form", chromedp.Navigate(base+"/ui/login"), chromedp.WaitVisible("#token", chromedp.ByID))
	var hint string
	bt.Run(t, ctx, 10*time.Second, "read the hint", chromedp.Text("#hint", &hint, chromedp.ByID))
	if want := filepath.Join(c.dir, "data", "token"); !strings.Contains(hint, want) {
		t.Errorf("the login hint says %q, want this herd up's token file %s", hint, want)
	}
	bt.Login(t, ctx, base, token)
	applyManifest(t, cl, manifest)
	bt.Run(t, ctx, 20*time.Second, "open the fleet's page", chromedp.Navigate(base+"/ui/fleets/demo"))
	bt.WaitTrue(t, ctx, 20*time.Second, `document.body.dataset.rendered !== undefined`, `document.body.innerText`)
	// Note every phase, ready count and Ready condition the page shows, from its instances'
	// boot until the fleet is healthy.
	var ok bool
	bt.Run(t, ctx, 10*time.Second, "watch the fleet's state", chromedp.Evaluate(`(() => {
		window.__states = [];
		const note = () => {
			const phase = document.getElementById('fleet-phase'), ready = document.getElementById('fleet-ready');
			const cond = document.querySelector('#conditions [data-type="Ready"]');
			if (!phase) return;
			const s = phase.textContent + ' | ' + ready.textContent.split(' (')[0] + ' | ' + (cond ? cond.textContent : '-');
			if (window.__states[window.__states.length - 1] !== s) window.__states.push(s);
		};
		new MutationObserver(note).observe(document.getElementById('fleet'), {subtree: true, childList: true, characterData: true});
		note();
		return true; })()`, &ok))

	// Healthy: Ready with its three instances, every condition good, each instance healthy in the
	// load balancer.
	good := `['Ready', 'Available', 'LoadBalancerReady', 'Degraded'].every(t => (document.querySelector('#conditions [data-type="' + t + '"]') || {}).dataset?.tone === 'good')`
	cells := `[...document.querySelectorAll('.grid .cell')]`
	bt.WaitTrue(t, ctx, 60*time.Second, `document.getElementById('fleet-phase').textContent === 'Ready' &&
		document.getElementById('fleet-ready').textContent.startsWith('3/3 ready') && `+good+` && `+cells+`.length === 3 &&
		`+cells+`.every(c => c.dataset.state === 'ok' && c.title.includes('LB healthy'))`,
		`document.getElementById('fleet').innerText + ' | ' + `+cells+`.map(c => c.title.replace('\n', ' ')).join(', ')`)
	var states []string
	bt.Run(t, ctx, 10*time.Second, "read the states", chromedp.Evaluate(`window.__states`, &states))
	t.Logf("the fleet's page showed: %q", states)
	// The phase and the Ready condition come from one status write, so the page never shows
	// one saying Ready while the other does not.
	for _, s := range states {
		parts := strings.Split(s, " | ")
		if len(parts) != 3 || parts[2] == "-" {
			continue
		}
		if phaseReady, condReady := parts[0] == "Ready", parts[2] == "Ready=True"; phaseReady != condReady {
			t.Errorf("the page showed %q: the phase and the Ready condition disagree", s)
		}
	}
	bt.Screenshots(t, ctx, "fake-fleet", 1400, 600)

	// The traffic reaches an instance through the load balancer.
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get(fmt.Sprintf("http://127.0.0.1:%d/", port))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "hello from demo-") {
		t.Fatalf("through the load balancer: %d %q, want an instance's answer", resp.StatusCode, body)
	}

	bt.Run(t, ctx, 20*time.Second, "open the overview", chromedp.Navigate(base+"/ui/"))
	bt.WaitTrue(t, ctx, 20*time.Second, `(document.querySelector('[data-fleet="demo"]') || {}).innerText?.includes('3/3 ready')`, `document.querySelector('main').innerText`)
	bt.Screenshots(t, ctx, "fake-overview", 1400, 600)
	insts, err := cl.ListInstances(t.Context(), "demo")
	if err != nil || len(insts) == 0 {
		t.Fatalf("instances: %v %v", insts, err)
	}
	bt.Run(t, ctx, 20*time.Second, "open an instance page", chromedp.Navigate(base+"/ui/instances/"+insts[0].Metadata.Name))
	bt.WaitTrue(t, ctx, 20*time.Second, `(document.getElementById('instance-state') || {}).dataset?.state === 'ok'`, `document.querySelector('main').innerText`)
	bt.Screenshots(t, ctx, "fake-instance", 1400, 600)
}
