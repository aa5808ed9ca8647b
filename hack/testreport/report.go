package main

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
)

// event is one line of go test -json (cmd/test2json's TestEvent, with the build events of go test).
type event struct {
	Action      string
	Package     string
	Test        string
	Output      string
	ImportPath  string  // build-output, build-fail
	FailedBuild string  // a package's fail: the build that failed
	Elapsed     float64 // seconds, on a test's or package's end
}

// timed is how long a top-level test took.
type timed struct {
	id      testID
	seconds float64
}

// summary is what a go test -json stream amounts to. Every test and subtest that ends counts once:
// run counts those that passed or failed (a test still running when its package ended, killed by a
// timeout or a panic, counts as failed), skipped those that skipped.
type summary struct {
	run, skipped, allowedSkips int
	failed                     []string // tests that failed, packages that did not build or ended failing
	unallowed                  []string // skips not on the allow-list, with their reasons
	stale                      []string // allow-list entries that match no test of the stream
	packages                   int
	durations                  []timed // top-level tests that ended
}

// slowest returns the n top-level tests that took longest, longest first: where the run's time
// went, since packages run in parallel and real-instance tests wait for each other.
func (s summary) slowest(n int) []string {
	d := slices.Clone(s.durations)
	slices.SortStableFunc(d, func(a, b timed) int { return cmp.Compare(b.seconds, a.seconds) })
	var out []string
	for _, t := range d[:min(n, len(d))] {
		out = append(out, fmt.Sprintf("%s %.1fs", t.id, t.seconds))
	}
	return out
}

// line is the last line of make test.
func (s summary) line() string {
	return fmt.Sprintf("tests: run=%d skipped=%d allowed_skips=%d", s.run, s.skipped, s.allowedSkips)
}

// err says why the stream is not a success, or is nil. Stale entries count only when strict.
func (s summary) err(strict bool) error {
	var errs []error
	if s.packages == 0 {
		errs = append(errs, errors.New("no package reported a result"))
	}
	if len(s.failed) > 0 {
		errs = append(errs, fmt.Errorf("%d failed: %s", len(s.failed), strings.Join(s.failed, ", ")))
	}
	if len(s.unallowed) > 0 {
		errs = append(errs, fmt.Errorf("%d skipped without being on the allow-list (a skip has not passed: fix what the test needs, or list it with its reason): %s",
			len(s.unallowed), strings.Join(s.unallowed, "; ")))
	}
	if strict && len(s.stale) > 0 {
		errs = append(errs, fmt.Errorf("the allow-list names tests that did not report at all (renamed or removed? remove their lines): %s", strings.Join(s.stale, ", ")))
	}
	return errors.Join(errs...)
}

// reporter turns a go test -json stream into what go test prints without -v: each package's
// result line, and the whole output of each test that failed or skipped without leave, as they
// happen. Allowed skips get one line.
type reporter struct {
	w      io.Writer
	allow  allowList
	tests  map[testID]*bytes.Buffer // output of tests that have not ended
	pkgs   map[string]*bytes.Buffer // output of packages outside their tests
	builds map[string]*bytes.Buffer // build output by import path
	seen   map[testID]bool          // tests that ended
	sum    summary
}

// report reads a go test -json stream from r, writes the readable report to w and returns the sum.
func report(r io.Reader, w io.Writer, allow allowList) (summary, error) {
	rep := &reporter{w: w, allow: allow, tests: map[testID]*bytes.Buffer{}, pkgs: map[string]*bytes.Buffer{},
		builds: map[string]*bytes.Buffer{}, seen: map[testID]bool{}}
	br := bufio.NewReader(r)
	for {
		line, err := br.ReadBytes('\n')
		if len(bytes.TrimSpace(line)) > 0 {
			var e event
			if json.Unmarshal(line, &e) != nil || e.Action == "" {
				// Not an event: something go test printed itself. Pass it on.
				w.Write(line)
			} else {
				rep.handle(e)
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return rep.sum, fmt.Errorf("read go test -json: %w", err)
		}
	}
	for id := range allow {
		if !rep.seen[id] {
			rep.sum.stale = append(rep.sum.stale, id.String())
		}
	}
	slices.Sort(rep.sum.stale)
	return rep.sum, nil
}

func (r *reporter) handle(e event) {
	id := testID{e.Package, e.Test}
	switch {
	case e.Action == "build-output":
		buf(r.builds, e.ImportPath).WriteString(e.Output)
	case e.Action == "build-fail":
		r.w.Write(buf(r.builds, e.ImportPath).Bytes())
		delete(r.builds, e.ImportPath)
	case e.Action == "output" && e.Test != "":
		buf(r.tests, id).WriteString(e.Output)
	case e.Action == "output":
		buf(r.pkgs, e.Package).WriteString(e.Output)
	case e.Test != "" && (e.Action == "pass" || e.Action == "fail" || e.Action == "skip"):
		if !strings.Contains(e.Test, "/") {
			r.sum.durations = append(r.sum.durations, timed{id, e.Elapsed})
		}
		r.testEnded(id, e.Action)
	case e.Test == "" && (e.Action == "pass" || e.Action == "fail" || e.Action == "skip"):
		r.packageEnded(e)
	}
}

func buf[K comparable](m map[K]*bytes.Buffer, k K) *bytes.Buffer {
	b := m[k]
	if b == nil {
		b = &bytes.Buffer{}
		m[k] = b
	}
	return b
}

func (r *reporter) testEnded(id testID, action string) {
	out := r.tests[id]
	delete(r.tests, id)
	r.seen[id] = true
	switch action {
	case "pass":
		r.sum.run++
	case "fail":
		r.sum.run++
		r.sum.failed = append(r.sum.failed, id.String())
		r.printOutput(id, out)
	case "skip":
		r.sum.skipped++
		why := skipReason(out)
		if allowed, ok := r.allow[id]; ok {
			r.sum.allowedSkips++
			fmt.Fprintf(r.w, "--- SKIP (allowed: %s): %s: %s\n", allowed, id, why)
			return
		}
		r.sum.unallowed = append(r.sum.unallowed, fmt.Sprintf("%s: %s", id, why))
		r.printOutput(id, out)
		fmt.Fprintf(r.w, "--- SKIP not on the allow-list: %s\n", id)
	}
}

// packageEnded prints the package's result line, and when it failed its own output and that of
// its tests that never ended (a timeout's or a panic's), which count as failed.
func (r *reporter) packageEnded(e event) {
	r.sum.packages++
	var open []testID
	for id := range r.tests {
		if id.pkg == e.Package {
			open = append(open, id)
		}
	}
	slices.SortFunc(open, func(a, b testID) int { return strings.Compare(a.test, b.test) })
	for _, id := range open {
		r.seen[id] = true
		r.sum.run++
		r.sum.failed = append(r.sum.failed, id.String()+" (did not finish)")
		r.printOutput(id, r.tests[id])
		delete(r.tests, id)
	}
	out := r.pkgs[e.Package]
	delete(r.pkgs, e.Package)
	switch e.Action {
	case "pass":
		fmt.Fprintln(r.w, lastLine(out, "ok  \t"+e.Package))
	case "fail":
		if e.FailedBuild != "" {
			r.sum.failed = append(r.sum.failed, e.Package+" [build failed]")
		} else if len(open) == 0 && !r.anyFailed(e.Package) {
			// Failed outside any test: TestMain, init, or a panic between tests.
			r.sum.failed = append(r.sum.failed, e.Package)
		}
		if out != nil {
			r.w.Write(out.Bytes())
		} else {
			fmt.Fprintf(r.w, "FAIL\t%s\n", e.Package)
		}
	}
	// "skip": no test files; go test prints nothing worth reading.
}

func (r *reporter) anyFailed(pkg string) bool {
	return slices.ContainsFunc(r.sum.failed, func(f string) bool { return strings.HasPrefix(f, pkg+" ") })
}

// printOutput writes a test's output without go test -json's framing lines (=== RUN and the like).
func (r *reporter) printOutput(id testID, out *bytes.Buffer) {
	fmt.Fprintf(r.w, "=== %s\n", id)
	if out == nil {
		return
	}
	for line := range strings.Lines(out.String()) {
		if !strings.HasPrefix(line, "=== ") {
			io.WriteString(r.w, line)
		}
	}
}

// skipReason is the last line a test logged before its --- SKIP line: what it passed to t.Skip.
func skipReason(out *bytes.Buffer) string {
	if out == nil {
		return "(no reason given)"
	}
	why := "(no reason given)"
	for line := range strings.Lines(out.String()) {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "--- SKIP") {
			break
		}
		if line != "" && !strings.HasPrefix(line, "=== ") {
			why = line
		}
	}
	return why
}

// lastLine is the last non-empty line of out, or def.
func lastLine(out *bytes.Buffer, def string) string {
	if out == nil {
		return def
	}
	last := def
	for line := range strings.Lines(out.String()) {
		if l := strings.TrimRight(line, "\n"); strings.TrimSpace(l) != "" {
			last = l
		}
	}
	return last
}
