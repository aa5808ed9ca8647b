// Package browsertest drives Debian's chromium, headless, from Go tests of the dashboard: a fresh
// profile per test, no network of its own (no updates, sync or background fetches, which would
// try to reach the internet and fail), and helpers to log in, wait on the page and keep
// screenshots in the test's artifact directory.
package browsertest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
)

// Chromium is Debian's browser, installed by hack/install-deps.sh.
const Chromium = "/usr/bin/chromium"

// windowHeight is the browser window's height; its width starts at 1400.
const windowHeight = 1000

// New starts a headless chromium for the test and returns a tab's context; both end with the test.
func New(t *testing.T) context.Context {
	t.Helper()
	if _, err := os.Stat(Chromium); err != nil {
		t.Fatalf("%s: %v (hack/install-deps.sh installs Debian's chromium)", Chromium, err)
	}
	// The profile is not t.TempDir(): chromium's helper processes may still write into it for a
	// moment after the browser is stopped, which fails t.TempDir()'s own removal. It is removed
	// once nothing writes into it any more.
	profile, err := os.MkdirTemp("", "herd-chromium-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { removeWhenQuiet(t, profile) })
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(Chromium),
		chromedp.Flag("headless", true),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true),
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(profile),
		// With /dev/shm off, chromium keeps its shared memory in files under $TMPDIR that it
		// does not always remove: in the profile, they go with it.
		chromedp.Env("TMPDIR=" + profile),
		chromedp.WindowSize(1400, windowHeight),
	}
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(allocCtx, chromedp.WithErrorf(t.Logf))
	t.Cleanup(func() { cancel(); cancelAlloc() })
	// Start the browser now, so that its start-up is not counted in the first step's time.
	if err := chromedp.Run(ctx); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return ctx
}

// Run runs actions with a deadline, failing the test with what was being done.
func Run(t *testing.T, ctx context.Context, timeout time.Duration, what string, actions ...chromedp.Action) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := chromedp.Run(ctx, actions...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// WaitTrue polls a JavaScript expression until it is true, failing the test with the last value
// of describe (an expression saying what the page shows) at the deadline.
func WaitTrue(t *testing.T, ctx context.Context, timeout time.Duration, expr, describe string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		var ok bool
		err := chromedp.Run(ctx, chromedp.Evaluate(expr, &ok))
		if err == nil && ok {
			return
		}
		if time.Now().After(deadline) {
			var state string
			_ = chromedp.Run(ctx, chromedp.Evaluate(describe, &state))
			t.Fatalf("not true after %s: %s (err %v); the page shows: %s", timeout, expr, err, state)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Screenshot saves the whole page as PNG under the test's artifact directory and logs its path.
// Quality 100 is what makes chromium write PNG: below it, it writes JPEG.
func Screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	var png []byte
	Run(t, ctx, 30*time.Second, "screenshot "+name, chromedp.FullScreenshot(&png, 100))
	path := filepath.Join(t.ArtifactDir(), name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot %s: %s (%d KiB)", name, path, len(png)/1024)
}

// Resize sets the window's size, as a person dragging its edge does: the page lays out again and
// its resize observers run.
func Resize(t *testing.T, ctx context.Context, width, height int64) {
	t.Helper()
	Run(t, ctx, 10*time.Second, fmt.Sprintf("resize the window to %dx%d", width, height), chromedp.EmulateViewport(width, height))
}

// Screenshots saves the page as Screenshot does at each of the window widths (name-WIDTH.png),
// as it looks on a wide screen and on a narrow one, then gives the window its first width back.
func Screenshots(t *testing.T, ctx context.Context, name string, widths ...int64) {
	t.Helper()
	for _, w := range widths {
		Resize(t, ctx, w, windowHeight)
		Screenshot(t, ctx, fmt.Sprintf("%s-%d", name, w))
	}
	Resize(t, ctx, widths[0], windowHeight)
}

// Login opens base's dashboard, which sends the browser to the login form, and submits token.
func Login(t *testing.T, ctx context.Context, base, token string) {
	t.Helper()
	Run(t, ctx, 30*time.Second, "log in",
		chromedp.Navigate(base+"/ui/"),
		chromedp.WaitVisible("#token", chromedp.ByID),
		chromedp.SendKeys("#token", token, chromedp.ByID),
		chromedp.Submit("#token", chromedp.ByID),
	)
	// The form answers with a redirect: to the dashboard, or back to the form saying it failed.
	WaitTrue(t, ctx, 30*time.Second, `document.readyState === 'complete' && (location.pathname !== '/ui/login' || location.search.includes('failed'))`,
		`location.href + ': ' + document.body.innerText`)
}

// Location returns the page's URL.
func Location(t *testing.T, ctx context.Context) string {
	t.Helper()
	var loc string
	Run(t, ctx, 10*time.Second, "read the location", chromedp.Location(&loc))
	return loc
}

// Fetch runs fetch(path) in the page (with its cookies) and returns the status and body.
func Fetch(t *testing.T, ctx context.Context, path string) (int, string) {
	t.Helper()
	var res struct {
		Status int    `json:"status"`
		Body   string `json:"body"`
	}
	expr := fmt.Sprintf(`(async () => { const ac = new AbortController(); setTimeout(() => ac.abort(), 1500);
		const r = await fetch(%q, {signal: ac.signal});
		let body = ''; try { body = await r.text(); } catch (e) { body = 'aborted'; }
		return {status: r.status, body}; })()`, path)
	Run(t, ctx, 10*time.Second, "fetch "+path, chromedp.Evaluate(expr, &res, func(p *runtime.EvaluateParams) *runtime.EvaluateParams {
		return p.WithAwaitPromise(true)
	}))
	return res.Status, res.Body
}

// removeWhenQuiet removes dir, trying again for a few seconds while something still writes into
// it (RemoveAll fails with "directory not empty" when a file appears during the removal).
func removeWhenQuiet(t *testing.T, dir string) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := os.RemoveAll(dir)
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("remove the browser profile: %v", err)
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}
