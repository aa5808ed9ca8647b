package controlplane_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/client"
	"herd.dev/herd/internal/controlplane"
	"herd.dev/herd/internal/provider/fake"
	bt "herd.dev/herd/internal/web/browsertest"
)

// xss is a provider error that reaches the events and the instance's last error: markup that runs
// script if the dashboard ever parses it.
const xss = `<img src=x onerror="window.__herdXSS=1">`

// dashboardCluster runs herd up in this process on fake provider p and returns its address, its
// API token and a client.
func dashboardCluster(t *testing.T, p *fake.Provider) (*cluster, string, *client.Client) {
	t.Helper()
	controlplane.UseFakeProvider(t, p)
	c, cl := inProcess(t)
	token, err := os.ReadFile(filepath.Join(c.dir, "data", "token"))
	if err != nil {
		t.Fatal(err)
	}
	return c, strings.TrimSpace(string(token)), cl
}

// get fetches path from herd up with the given headers and returns the status and body.
func get(t *testing.T, base, path string, header map[string]string) (int, string) {
	t.Helper()
	req, err := http.NewRequest("GET", base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	resp, err := http.DefaultClient.Do(req.WithContext(ctx))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

func fleetManifest(name, image string, replicas int) string {
	return fmt.Sprintf(`apiVersion: herd.dev/v1alpha1
kind: Fleet
metadata: {name: %s}
spec:
  image: %s
  replicas: {min: 1, max: 200, desired: %d}
  rollout: {strategy: Rolling, maxSurge: 1, maxUnavailable: 0}
  regions: [{name: local, provider: fake, options: {bootDelay: 300ms}}]
`, name, image, replicas)
}

// TestIntegrationDashboard drives the dashboard of herd up (fake provider) in a real chromium: a
// wrong token shows and serves no data, the right one shows the fleet's instances, a provider
// error holding HTML shows as text, a killed instance's cell changes colour, and a rollout's
// progress appears on the fleet's page. Screenshots of each page go to the test's artifacts.
func TestIntegrationDashboard(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	p, err := fake.New(fake.Options{BootDelay: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	// The first Create fails with markup in its error, which the controller reports as an event.
	p.FailNext("Create", errors.New(xss))
	c, token, cl := dashboardCluster(t, p)
	base := "http://" + c.addr
	applyManifest(t, cl, fleetManifest("web", "hello", 3))
	ctx := bt.New(t)

	// A wrong token: back to the form, and nothing of the fleets anywhere.
	bt.Login(t, ctx, base, "not-the-token")
	if loc := bt.Location(t, ctx); !strings.HasSuffix(loc, "/ui/login?failed=1") {
		t.Fatalf("after a wrong token the browser is at %s, want the login form saying so", loc)
	}
	bt.WaitTrue(t, ctx, 5*time.Second, `!document.getElementById('failed').hidden`, `document.body.innerText`)
	var text string
	bt.Run(t, ctx, 10*time.Second, "read the page", chromedp.Text("body", &text, chromedp.ByQuery))
	if strings.Contains(text, "web") {
		t.Fatalf("the login page after a wrong token shows fleet data:\n%s", text)
	}
	for _, path := range []string{"/ui/api/stream", "/ui/api/v1/fleets", "/ui/api/stream?token=" + token} {
		code, body := bt.Fetch(t, ctx, path)
		if code != http.StatusUnauthorized || strings.Contains(body, `"web`) {
			t.Errorf("GET %s after a wrong login: %d %s, want 401 and no data", path, code, body)
		}
	}
	bt.Run(t, ctx, 10*time.Second, "open the dashboard", chromedp.Navigate(base+"/ui/fleets/web"))
	if loc := bt.Location(t, ctx); !strings.HasSuffix(loc, "/ui/login") {
		t.Fatalf("the fleet page without a login is at %s, want the login form", loc)
	}
	// The API's token is never taken from a URL, and the wrong one not from a header either.
	if code, body := get(t, base, "/ui/api/stream?token="+token, nil); code != http.StatusUnauthorized || strings.Contains(body, "web") {
		t.Errorf("stream with the token in the query: %d %s, want 401 and no data", code, body)
	}
	if code, _ := get(t, base, "/ui/api/stream", map[string]string{"Authorization": "Bearer wrong"}); code != http.StatusUnauthorized {
		t.Errorf("stream with a wrong bearer token: %d, want 401", code)
	}

	// The right token: the overview shows the fleet's three instances, serving.
	bt.Login(t, ctx, base, token)
	if loc := bt.Location(t, ctx); !strings.HasSuffix(loc, "/ui/") {
		t.Fatalf("after the right token the browser is at %s, want /ui/", loc)
	}
	webCells := `[...document.querySelectorAll('[data-fleet="web"] .cell')]`
	bt.WaitTrue(t, ctx, 30*time.Second, webCells+`.filter(c => c.dataset.state === 'ok').length === 3 && `+webCells+`.length === 3`,
		webCells+`.map(c => c.dataset.name + ':' + c.dataset.state).join(' ') || document.body.innerText`)

	// The provider's error, markup and all, is an event's text: no img element, no script run.
	bt.WaitTrue(t, ctx, 20*time.Second, `[...document.querySelectorAll('.events td.msg')].some(td => td.textContent.includes('<img src=x onerror='))`,
		`document.querySelector('.events').innerText`)
	var injected bool
	bt.Run(t, ctx, 10*time.Second, "look for injected markup",
		chromedp.Evaluate(`document.querySelectorAll('main img').length > 0 || window.__herdXSS !== undefined`, &injected))
	if injected {
		t.Fatal("the event's message was parsed as HTML")
	}
	bt.Screenshot(t, ctx, "overview")

	// Kill an instance: its cell turns to failed, in another colour, and the fleet heals.
	insts, err := cl.ListInstances(t.Context(), "web")
	if err != nil || len(insts) == 0 {
		t.Fatalf("instances: %v %v", insts, err)
	}
	victim := insts[0].Metadata.Name
	// Record every state and colour the victim's cell takes, however briefly.
	bt.Run(t, ctx, 10*time.Second, "watch the victim's cell", chromedp.Evaluate(fmt.Sprintf(`(() => {
		window.__seen = [];
		const note = () => { const c = document.querySelector('.cell[data-name=%q]');
			if (c) window.__seen.push(c.dataset.state + '=' + getComputedStyle(c).backgroundColor); };
		note();
		new MutationObserver(note).observe(document.getElementById('fleets'), {subtree: true, attributes: true, childList: true});
		return true; })()`, victim), &injected))
	if err := p.Kill(victim, "kernel panic"); err != nil {
		t.Fatal(err)
	}
	// The controller records the dead instance Failed, or at once Terminating as healing replaces it.
	bt.WaitTrue(t, ctx, 20*time.Second, `window.__seen.some(s => s.startsWith('failed=') || s.startsWith('leaving='))`, `window.__seen.join(' ')`)
	var seen []string
	bt.Run(t, ctx, 10*time.Second, "read the cell's states", chromedp.Evaluate(`window.__seen`, &seen))
	okColour, deadColour := colour(seen, "ok"), colour(seen, "failed")
	if deadColour == "" {
		deadColour = colour(seen, "leaving")
	}
	if okColour == "" || deadColour == "" || okColour == deadColour {
		t.Fatalf("the killed instance's cell went through %v: want ok, then failed or leaving in another colour", seen)
	}
	t.Logf("killed %s: its cell went %v", victim, seen)
	bt.Screenshot(t, ctx, "overview-killed")
	bt.WaitTrue(t, ctx, 30*time.Second, webCells+`.filter(c => c.dataset.state === 'ok').length === 3 && !`+webCells+`.some(c => c.dataset.name === '`+victim+`')`,
		webCells+`.map(c => c.dataset.name + ':' + c.dataset.state).join(' ')`)

	// The fleet's page, then a rollout: a new image. The new revision appears with its weight
	// over time and takes over.
	bt.Run(t, ctx, 20*time.Second, "open the fleet page", chromedp.Navigate(base+"/ui/fleets/web"))
	bt.WaitTrue(t, ctx, 20*time.Second, `document.querySelectorAll('.grid .cell[data-state="ok"]').length === 3 && document.querySelectorAll('#revisions tbody tr').length === 1`,
		`document.querySelector('main').innerText`)
	f, err := cl.GetFleet(t.Context(), "web")
	if err != nil {
		t.Fatal(err)
	}
	oldRev := f.Status.CurrentRevision
	applyManifest(t, cl, fleetManifest("web", "hello-v2", 3))
	var newRev string
	c.waitFor(10*time.Second, func() string {
		f, err := cl.GetFleet(t.Context(), "web")
		if err != nil || f.Status.CurrentRevision == oldRev {
			return fmt.Sprintf("no new revision yet (%v)", err)
		}
		newRev = f.Status.CurrentRevision
		return ""
	})
	legend := `[...document.querySelectorAll('[data-chart="traffic weight per revision"] .u-legend .u-series th')].map(th => th.textContent).join(' ')`
	bt.WaitTrue(t, ctx, 30*time.Second, fmt.Sprintf(`%s.includes(%q) && %s.includes(%q)`, legend, oldRev, legend, newRev), legend)
	bt.WaitTrue(t, ctx, 60*time.Second, fmt.Sprintf(`document.getElementById('rollout-state').textContent.includes(%q) &&
		document.querySelectorAll('#revisions tbody tr').length === 1 && document.querySelectorAll('.grid .cell[data-state="ok"]').length === 3 &&
		document.querySelectorAll('.grid .cell.old').length === 0`, newRev+": 3/3 ready, weight 100%"),
		`document.getElementById('rollout').innerText + ' | ' + document.querySelectorAll('.grid .cell').length + ' cells'`)
	bt.Screenshot(t, ctx, "fleet-rolled-out")

	// The instance's page.
	insts, err = cl.ListInstances(t.Context(), "web")
	if err != nil || len(insts) == 0 {
		t.Fatalf("instances: %v %v", insts, err)
	}
	bt.Run(t, ctx, 20*time.Second, "open an instance page", chromedp.Navigate(base+"/ui/instances/"+insts[0].Metadata.Name))
	bt.WaitTrue(t, ctx, 20*time.Second, `(document.getElementById('instance-state') || {}).dataset?.state === 'ok' &&
		document.getElementById('pods').innerText.includes('no access to a Kubernetes API')`, `document.querySelector('main').innerText`)
	bt.Screenshot(t, ctx, "instance")

	// Logging out ends the session: the data answers 401 again.
	bt.Run(t, ctx, 20*time.Second, "log out", chromedp.Click("header form button", chromedp.ByQuery), chromedp.WaitVisible("#token", chromedp.ByID))
	if code, _ := bt.Fetch(t, ctx, "/ui/api/stream"); code != http.StatusUnauthorized {
		t.Errorf("stream after logout: %d, want 401", code)
	}
}

// colour returns the background colour noted for state among "state=colour" entries.
func colour(seen []string, state string) string {
	for _, s := range seen {
		if c, ok := strings.CutPrefix(s, state+"="); ok {
			return c
		}
	}
	return ""
}

// TestIntegrationDashboardScale shows 5,000 fake instances in 50 fleets and prints how long the
// overview and one fleet's page take from navigation to their grid drawn.
func TestIntegrationDashboardScale(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	const fleets, perFleet = 50, 100
	p, err := fake.New(fake.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c, token, cl := dashboardCluster(t, p)
	base := "http://" + c.addr
	var manifest strings.Builder
	for i := range fleets {
		fmt.Fprintf(&manifest, "---\n%s", strings.Replace(fleetManifest(fmt.Sprintf("f%02d", i), "hello", perFleet), "bootDelay: 300ms", "bootDelay: 0s", 1))
	}
	applyManifest(t, cl, manifest.String())
	start := time.Now()
	c.waitFor(5*time.Minute, func() string {
		insts, err := cl.ListInstances(t.Context(), "")
		if err != nil {
			return err.Error()
		}
		ready := 0
		for _, in := range insts {
			if in.Status.Phase == v1alpha1.PhaseReady {
				ready++
			}
		}
		if ready != fleets*perFleet {
			return fmt.Sprintf("%d of %d instances ready", ready, fleets*perFleet)
		}
		return ""
	})
	t.Logf("%d instances ready in %s", fleets*perFleet, time.Since(start).Round(time.Millisecond))

	// What the overview's stream sends first (read for up to 2 s).
	_, snap := get(t, base, "/ui/api/stream", map[string]string{"Authorization": "Bearer " + token})
	t.Logf("overview snapshot: %d KiB", len(snap)/1024)

	ctx := bt.New(t)
	bt.Login(t, ctx, base, token)
	for _, page := range []struct {
		name, path string
		cells      int
	}{{"overview", "/ui/", fleets * perFleet}, {"fleet", "/ui/fleets/f07", perFleet}} {
		bt.Run(t, ctx, 30*time.Second, "open "+page.path, chromedp.Navigate(base+page.path))
		bt.WaitTrue(t, ctx, 30*time.Second, fmt.Sprintf(`document.body.dataset.rendered !== undefined && document.querySelectorAll('.cell').length === %d`, page.cells),
			`document.querySelectorAll('.cell').length + ' cells'`)
		var rendered float64
		bt.Run(t, ctx, 10*time.Second, "read the timing", chromedp.Evaluate(`performance.getEntriesByName('herd-rendered')[0].startTime`, &rendered))
		t.Logf("%s page, %d instances: first render %.0f ms after navigation", page.name, page.cells, rendered)
		bt.Screenshot(t, ctx, "scale-"+page.name)
	}
}
