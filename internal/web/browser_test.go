package web

import (
	"bytes"
	"context"
	"fmt"
	"image/png"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/apiserver"
	"herd.dev/herd/internal/store"
	"herd.dev/herd/internal/store/memory"
	"herd.dev/herd/internal/usage"
	bt "herd.dev/herd/internal/web/browsertest"
)

// canaryTraffic is the Usage of the pages' tests: requests for fleet canary's instances, none for
// the others.
type canaryTraffic struct{}

func (canaryTraffic) Report([]*v1alpha1.Instance) apiserver.UsageReport {
	return apiserver.UsageReport{}
}

func (canaryTraffic) Groups(insts []*v1alpha1.Instance, _ time.Duration) []usage.GroupUsage {
	var out []usage.GroupUsage
	for _, in := range insts {
		if in.Spec.Fleet == "canary" {
			rps, p95 := 12.5, 0.004
			out = append(out, usage.GroupUsage{Revision: in.Spec.Revision, Region: in.Spec.Region,
				Usage: apiserver.Usage{RequestsPerSecond: &rps, LatencyP95Seconds: &p95}})
			break
		}
	}
	return out
}

func int32p(n int32) *int32 { return &n }

func conds(kv ...string) []metav1.Condition {
	var out []metav1.Condition
	for i := 0; i < len(kv); i += 2 {
		out = append(out, metav1.Condition{Type: kv[i], Status: metav1.ConditionStatus(kv[i+1]), Reason: "Test"})
	}
	return out
}

// pagesEnv serves the dashboard over a store holding what a new user sees: the fake example's
// fleet (one region, everything fine, no rollout, no message) and a Canary fleet in two regions of
// 6 instances each in the middle of its rollout, with 14 ready (the canary's surge).
func pagesEnv(t *testing.T) string {
	t.Helper()
	st := memory.New()
	t.Cleanup(func() { st.Close() })
	put(t, st, store.Fleets, &v1alpha1.Fleet{Metadata: v1alpha1.ObjectMeta{Name: "demo"},
		Spec: v1alpha1.FleetSpec{Image: "demo", Replicas: v1alpha1.Replicas{Min: int32p(1), Max: int32p(10), Desired: int32p(3)},
			Regions: []v1alpha1.Region{{Name: "local", Provider: "fake"}}},
		Status: v1alpha1.FleetStatus{Phase: "Ready", Replicas: 3, ReadyReplicas: 3, CurrentRevision: "demo-1",
			Revisions:  []v1alpha1.RevisionStatus{{Name: "demo-1", Image: "demo", Replicas: 3, ReadyReplicas: 3, Weight: 100}},
			Conditions: conds("Ready", "True", "Available", "True", "Progressing", "False", "LoadBalancerReady", "True", "Degraded", "False")}})
	put(t, st, store.Fleets, &v1alpha1.Fleet{Metadata: v1alpha1.ObjectMeta{Name: "canary"},
		Spec: v1alpha1.FleetSpec{Image: "hello-v2", Replicas: v1alpha1.Replicas{Min: int32p(1), Max: int32p(20), Desired: int32p(6)},
			Listeners: []v1alpha1.Listener{{Port: 8080, InstancePort: 30080}},
			Rollout:   v1alpha1.Rollout{Strategy: v1alpha1.StrategyCanary, Steps: []v1alpha1.CanaryStep{{Weight: 10}, {Weight: 50}}},
			Regions:   []v1alpha1.Region{{Name: "eu", Provider: "fake"}, {Name: "us", Provider: "fake"}}},
		Status: v1alpha1.FleetStatus{Phase: "Scaling", Replicas: 14, ReadyReplicas: 14, CurrentRevision: "canary-2",
			Message: "Canary rollout to canary-2: step 1",
			Rollout: &v1alpha1.RolloutStatus{Revision: "canary-2", PreviousRevision: "canary-1", Strategy: v1alpha1.StrategyCanary, Phase: v1alpha1.RolloutProgressing, Step: 1},
			Revisions: []v1alpha1.RevisionStatus{{Name: "canary-2", Image: "hello-v2", Replicas: 2, ReadyReplicas: 2, Weight: 10},
				{Name: "canary-1", Image: "hello", Replicas: 12, ReadyReplicas: 12, Weight: 90}},
			Conditions: conds("Ready", "False", "Available", "True", "Progressing", "True", "LoadBalancerReady", "Unknown", "Degraded", "True")}})
	for i, name := range []string{"demo-aaaaa", "demo-bbbbb", "demo-ccccc"} {
		put(t, st, store.Instances, &v1alpha1.Instance{Metadata: v1alpha1.ObjectMeta{Name: name},
			Spec:   v1alpha1.InstanceSpec{Fleet: "demo", Region: "local", Revision: "demo-1", Provider: "fake"},
			Status: v1alpha1.InstanceStatus{Phase: v1alpha1.PhaseReady, Address: fmt.Sprintf("127.1.0.%d", i+1)}})
	}
	for i := range 14 {
		rev, region := "canary-1", []string{"eu", "us"}[i%2]
		if i >= 12 {
			rev = "canary-2"
		}
		put(t, st, store.Instances, &v1alpha1.Instance{Metadata: v1alpha1.ObjectMeta{Name: fmt.Sprintf("canary-%05d", i)},
			Spec:   v1alpha1.InstanceSpec{Fleet: "canary", Region: region, Revision: rev, Provider: "fake"},
			Status: v1alpha1.InstanceStatus{Phase: v1alpha1.PhaseReady}})
	}
	api := apiserver.New(apiserver.Options{Store: st, Token: token})
	h := New(Options{Store: st, Token: token, API: api, SampleEvery: 200 * time.Millisecond, Usage: canaryTraffic{},
		TokenFile: "/srv/herd-data/token", ConfigFile: "/srv/herd.config"})
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	t.Cleanup(h.Close)
	return srv.URL
}

// text returns the inner text of the element selector finds, or "" when there is none.
func text(t *testing.T, ctx context.Context, selector string) string {
	t.Helper()
	var s string
	bt.Run(t, ctx, 10*time.Second, "read "+selector, chromedp.Evaluate(fmt.Sprintf(`(document.querySelector(%q) || {}).innerText || ''`, selector), &s))
	return s
}

// TestPagesReadTrue looks at every page as a new user would and checks what they read: no
// "null" from values the page left out, ready counts out of every region's instances as herd get
// counts them, conditions coloured by what they mean, a page for what does not exist, a favicon
// and a login hint that names the real token file.
func TestPagesReadTrue(t *testing.T) {
	base := pagesEnv(t)
	ctx := bt.New(t)

	// Before logging in: the login form names the token file, and the favicon needs no session.
	bt.Run(t, ctx, 20*time.Second, "open the login form", chromedp.Navigate(base+"/ui/login"), chromedp.WaitVisible("#token", chromedp.ByID))
	if code, body := bt.Fetch(t, ctx, "/favicon.ico"); code != http.StatusOK || !strings.HasPrefix(body, "\x00\x00\x01\x00") {
		t.Errorf("/favicon.ico without a session: %d %q, want 200 and an icon", code, body[:min(len(body), 40)])
	}
	if hint := text(t, ctx, "#hint"); !strings.Contains(hint, "/srv/herd-data/token") || !strings.Contains(hint, "/srv/herd.config") ||
		strings.Contains(hint, "~/.local/share") {
		t.Errorf("the login hint says %q, want the token file /srv/herd-data/token and the config /srv/herd.config", hint)
	}
	bt.Login(t, ctx, base, token)

	// The overview: no "null" on a card, and each fleet's ready count out of all its regions.
	bt.WaitTrue(t, ctx, 20*time.Second, `document.querySelectorAll('[data-fleet] .cell').length === 17`, `document.querySelector('main').innerText`)
	for fleet, want := range map[string]string{"demo": "3/3 ready", "canary": "14/12 ready"} {
		card := text(t, ctx, fmt.Sprintf(`[data-fleet=%q]`, fleet))
		if strings.Contains(card, "null") || strings.Contains(card, "undefined") || !strings.Contains(card, want) {
			t.Errorf("fleet %s's card reads %q, want %q and no null or undefined", fleet, card, want)
		}
	}
	bt.Screenshots(t, ctx, "overview", 1400, 600)

	// The fleet pages: counts as on the overview, and conditions coloured by their meaning.
	tone := func(cond string) (string, string) {
		var res []string
		bt.Run(t, ctx, 10*time.Second, "read condition "+cond, chromedp.Evaluate(fmt.Sprintf(`(() => {
			const c = document.querySelector('#conditions [data-type=%q]');
			return c ? [c.dataset.tone, getComputedStyle(c).color + ' on ' + getComputedStyle(c).backgroundColor] : ['', ''];
		})()`, cond), &res))
		return res[0], res[1]
	}
	bt.Run(t, ctx, 20*time.Second, "open fleet demo", chromedp.Navigate(base+"/ui/fleets/demo"))
	bt.WaitTrue(t, ctx, 20*time.Second, `!!document.getElementById('conditions')`, `document.querySelector('main').innerText`)
	if main := text(t, ctx, "main"); strings.Contains(main, "null") || strings.Contains(main, "undefined") {
		t.Errorf("fleet demo's page shows null or undefined:\n%s", main)
	}
	if got := text(t, ctx, "#fleet-ready"); !strings.HasPrefix(got, "3/3 ready") {
		t.Errorf("fleet demo's page: %q, want 3/3 ready", got)
	}
	readyTone, readyColour := tone("Ready")
	degradedTone, degradedColour := tone("Degraded")
	if readyTone != "good" || degradedTone != "good" || degradedColour != readyColour {
		t.Errorf("fleet demo: Ready=True is %s (%s), Degraded=False %s (%s): want both good, in one colour", readyTone, readyColour, degradedTone, degradedColour)
	}
	bt.Screenshots(t, ctx, "fleet-demo", 1400, 600)

	bt.Run(t, ctx, 20*time.Second, "open fleet canary", chromedp.Navigate(base+"/ui/fleets/canary"))
	bt.WaitTrue(t, ctx, 20*time.Second, `!!document.getElementById('conditions')`, `document.querySelector('main').innerText`)
	if got := text(t, ctx, "#fleet-ready"); !strings.HasPrefix(got, "14/12 ready") {
		t.Errorf("fleet canary's page: %q, want 14/12 ready", got)
	}
	notReadyTone, notReadyColour := tone("Ready")
	degradedTone, degradedColour = tone("Degraded")
	progressingTone, _ := tone("Progressing")
	unknownTone, _ := tone("LoadBalancerReady")
	if notReadyTone != "bad" || degradedTone != "bad" || degradedColour != notReadyColour || degradedColour == readyColour {
		t.Errorf("fleet canary: Ready=False is %s (%s), Degraded=True %s (%s): want both bad, in one colour other than good's %s",
			notReadyTone, notReadyColour, degradedTone, degradedColour, readyColour)
	}
	if progressingTone != "neutral" || unknownTone != "neutral" {
		t.Errorf("fleet canary: Progressing=True is %s, LoadBalancerReady=Unknown %s: want both neutral", progressingTone, unknownTone)
	}

	// Charts: canary's requests draw a plot; what has no figures says why instead of empty axes.
	chart := func(title string) string { return fmt.Sprintf(`document.querySelector('[data-chart=%q]')`, title) }
	bt.WaitTrue(t, ctx, 20*time.Second, chart("requests/s")+`.dataset.empty === 'false' && !!`+chart("requests/s")+`.querySelector('canvas')`,
		chart("requests/s")+`.outerHTML.slice(0, 300)`)
	if got := text(t, ctx, `[data-chart="5xx/s"] .nodata`); got != "no requests in the last five minutes" {
		t.Errorf("canary's 5xx chart, with no figure, says %q", got)
	}
	bt.Screenshots(t, ctx, "fleet-canary", 1400, 600)
	bt.Run(t, ctx, 20*time.Second, "open fleet demo", chromedp.Navigate(base+"/ui/fleets/demo"))
	// Samples have come (the weights are drawn), and none has requests for demo.
	bt.WaitTrue(t, ctx, 20*time.Second, chart("traffic weight per revision")+`.dataset.empty === 'false' && `+
		chart("requests/s")+`.dataset.empty === 'true' && `+chart("requests/s")+`.querySelector('.nodata').offsetHeight > 100`,
		`document.querySelector('.charts').innerText`)
	if got := text(t, ctx, `[data-chart="requests/s"] .nodata`); !strings.Contains(got, "no listeners") {
		t.Errorf("demo's request chart, for a fleet without listeners, says %q", got)
	}

	// An instance page, then what does not exist: a 404 page that says so and leads back.
	bt.Run(t, ctx, 20*time.Second, "open an instance", chromedp.Navigate(base+"/ui/instances/demo-aaaaa"))
	bt.WaitTrue(t, ctx, 20*time.Second, `!!document.getElementById('instance-state')`, `document.querySelector('main').innerText`)
	if main := text(t, ctx, "main"); strings.Contains(main, "null") || !strings.Contains(main, "a fake instance has no agent") {
		t.Errorf("instance page:\n%s", main)
	}
	bt.Screenshots(t, ctx, "instance", 1400, 600)
	for path, want := range map[string]string{"/ui/fleets/nope": "No fleet named nope", "/ui/instances/nope-zzzzz": "No instance named nope-zzzzz",
		"/ui/nothing/here": "No page at /ui/nothing/here"} {
		if code, _ := bt.Fetch(t, ctx, path); code != http.StatusNotFound {
			t.Errorf("GET %s: %d, want 404", path, code)
		}
		bt.Run(t, ctx, 20*time.Second, "open "+path, chromedp.Navigate(base+path))
		if got := text(t, ctx, "#not-found"); !strings.Contains(got, want) || !strings.Contains(got, "All fleets") {
			t.Errorf("%s shows %q, want %q and a link to all fleets", path, got, want)
		}
	}
	bt.Screenshots(t, ctx, "not-found", 1400, 600)
}

// TestChartsFollowTheWindow narrows and widens the window: the charts fill their cards each
// time, with the page never wider than the window.
func TestChartsFollowTheWindow(t *testing.T) {
	base := pagesEnv(t)
	ctx := bt.New(t)
	bt.Login(t, ctx, base, token)
	bt.Run(t, ctx, 20*time.Second, "open fleet canary", chromedp.Navigate(base+"/ui/fleets/canary"))
	canvas := `document.querySelector('[data-chart="requests/s"] canvas')`
	fits := `(() => { const c = ` + canvas + `; if (!c) return false;
		const card = c.closest('.card').getBoundingClientRect(), r = c.getBoundingClientRect();
		return r.right <= card.right && r.width >= card.width - 40 && document.documentElement.scrollWidth <= document.documentElement.clientWidth; })()`
	describe := `(() => { const c = ` + canvas + `; if (!c) return 'no canvas';
		return 'canvas ' + c.getBoundingClientRect().width + ' in card ' + c.closest('.card').getBoundingClientRect().width +
			', page ' + document.documentElement.scrollWidth + ' in window ' + document.documentElement.clientWidth; })()`
	bt.WaitTrue(t, ctx, 20*time.Second, fits, describe)
	widths := map[int64]float64{}
	for _, w := range []int64{1400, 640, 1400} {
		bt.Resize(t, ctx, w, 900)
		bt.WaitTrue(t, ctx, 10*time.Second, fmt.Sprintf(`innerWidth === %d && %s`, w, fits), describe)
		// No time label is cut at the canvas's edges: its outer columns stay empty under the plot.
		bt.WaitTrue(t, ctx, 10*time.Second, `(() => { const c = `+canvas+`, g = c.getContext('2d');
			const band = Math.round(50 * devicePixelRatio), y = c.height - band;
			const blank = (x) => g.getImageData(x, y, 1, band).data.every((v, i) => i % 4 !== 3 || v === 0);
			return blank(0) && blank(c.width - 1); })()`, `'a time label touches the edge of the requests/s chart'`)
		var got float64
		bt.Run(t, ctx, 10*time.Second, "measure the chart", chromedp.Evaluate(canvas+`.getBoundingClientRect().width`, &got))
		if prev, ok := widths[w]; ok && prev != got {
			t.Errorf("at %d px the chart was %.0f px wide, then %.0f px", w, prev, got)
		}
		widths[w] = got
	}
	// Three charts a row at 1400 px, one at 640 px: the narrow window's chart is the wider.
	if widths[640] == widths[1400] {
		t.Errorf("the chart is %.0f px wide in a 640 px window and in a 1400 px one", widths[640])
	}
}

// TestFavicon fetches /favicon.ico without a session: a 32x32 icon.
func TestFavicon(t *testing.T) {
	base := pagesEnv(t)
	resp, err := http.Get(base + "/favicon.ico")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "image/x-icon" || len(body) < 22 {
		t.Fatalf("/favicon.ico: %d %s, %d bytes", resp.StatusCode, resp.Header.Get("Content-Type"), len(body))
	}
	img, err := png.Decode(bytes.NewReader(body[22:]))
	if err != nil || img.Bounds().Dx() != 32 || img.Bounds().Dy() != 32 {
		t.Fatalf("the icon's picture: %v %v", img, err)
	}
}
