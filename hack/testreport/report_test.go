package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The streams in testdata are go test -json's own, recorded by testdata/record.sh from the
// packages in testdata/src.

func stream(t *testing.T, names ...string) []byte {
	t.Helper()
	var all []byte
	for _, n := range names {
		b, err := os.ReadFile(filepath.Join("testdata", n+".jsonl"))
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, b...)
	}
	return all
}

func allowOf(t *testing.T, lines ...string) allowList {
	t.Helper()
	list, err := parseAllowList("test", strings.NewReader(strings.Join(lines, "\n")))
	if err != nil {
		t.Fatal(err)
	}
	return list
}

func reportOf(t *testing.T, allow allowList, names ...string) (summary, string) {
	t.Helper()
	var out bytes.Buffer
	sum, err := report(bytes.NewReader(stream(t, names...)), &out, allow)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("report:\n%s%s", out.String(), sum.line())
	return sum, out.String()
}

func wantLine(t *testing.T, sum summary, want string) {
	t.Helper()
	if got := sum.line(); got != want {
		t.Errorf("line = %q, want %q", got, want)
	}
}

func contains(t *testing.T, what, s string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(s, w) {
			t.Errorf("%s does not say %q", what, w)
		}
	}
}

func TestPass(t *testing.T) {
	sum, out := reportOf(t, allowList{}, "pass")
	// TestAdd, TestTable and its two subtests.
	wantLine(t, sum, "tests: run=4 skipped=0 allowed_skips=0")
	if err := sum.err(true); err != nil {
		t.Errorf("a passing stream fails: %v", err)
	}
	contains(t, "the report", out, "ok  \texample.com/fix/pass\t")
	if strings.Contains(out, "adding") {
		t.Errorf("the report shows a passing test's log:\n%s", out)
	}
}

func TestSkipOnTheList(t *testing.T) {
	allow := allowOf(t,
		"# a comment",
		"example.com/fix/skip TestNeedsTwoNodes  the suite's node-spreading tests need a second node",
		"",
		"example.com/fix/skip TestNeedsTool/missing frobnicate is not packaged for Debian",
	)
	sum, out := reportOf(t, allow, "skip")
	// TestRuns, TestNeedsTool and TestNeedsTool/found ran.
	wantLine(t, sum, "tests: run=3 skipped=2 allowed_skips=2")
	if err := sum.err(true); err != nil {
		t.Errorf("skips on the allow-list fail: %v", err)
	}
	contains(t, "the report", out,
		"--- SKIP (allowed: the suite's node-spreading tests need a second node): example.com/fix/skip TestNeedsTwoNodes: skip_test.go:9: needs a cluster of two nodes\n",
		"ok  \texample.com/fix/skip\t")
}

func TestSkipNotOnTheList(t *testing.T) {
	allow := allowOf(t, "example.com/fix/skip TestNeedsTwoNodes needs a second node")
	sum, out := reportOf(t, allow, "skip")
	wantLine(t, sum, "tests: run=3 skipped=2 allowed_skips=1")
	err := sum.err(false)
	if err == nil {
		t.Fatal("a skip that is not on the allow-list passes")
	}
	contains(t, "the error", err.Error(), "example.com/fix/skip TestNeedsTool/missing: skip_test.go:14: frobnicate not found on PATH (run make deps)")
	if strings.Contains(err.Error(), "TestNeedsTwoNodes") {
		t.Errorf("the error names the allowed skip: %v", err)
	}
	contains(t, "the report", out, "--- SKIP not on the allow-list: example.com/fix/skip TestNeedsTool/missing")

	// A parent on the list does not allow its subtests.
	sum, _ = reportOf(t, allowOf(t, "example.com/fix/skip TestNeedsTool why", "example.com/fix/skip TestNeedsTwoNodes why"), "skip")
	if sum.allowedSkips != 1 || sum.err(false) == nil {
		t.Errorf("a parent's entry allowed its subtest's skip: %s, %v", sum.line(), sum.err(false))
	}
}

func TestFailure(t *testing.T) {
	sum, out := reportOf(t, allowList{}, "pass", "fail")
	// pass's 4, and TestGood, TestBad and TestBad/inner.
	wantLine(t, sum, "tests: run=7 skipped=0 allowed_skips=0")
	err := sum.err(false)
	if err == nil {
		t.Fatal("a failing test passes")
	}
	contains(t, "the error", err.Error(), "example.com/fix/fail TestBad/inner", "example.com/fix/fail TestBad")
	if strings.Contains(err.Error(), "TestGood") {
		t.Errorf("the error names a test that passed: %v", err)
	}
	contains(t, "the report", out, "fail_test.go:9: got 3, want 4", "fail_test.go:8: before the check", "FAIL\texample.com/fix/fail\t")
	if strings.Contains(out, "=== RUN") {
		t.Errorf("the report shows go test's framing lines:\n%s", out)
	}
}

func TestBuildFailure(t *testing.T) {
	sum, out := reportOf(t, allowList{}, "broken", "pass")
	wantLine(t, sum, "tests: run=4 skipped=0 allowed_skips=0")
	err := sum.err(false)
	if err == nil {
		t.Fatal("a package that does not build passes")
	}
	contains(t, "the error", err.Error(), "example.com/fix/broken [build failed]")
	contains(t, "the report", out, "broken_test.go:5:36: declared and not used: x", "FAIL\texample.com/fix/broken [build failed]")
}

func TestTimeout(t *testing.T) {
	sum, out := reportOf(t, allowList{}, "hang")
	// TestQuick passed; TestHangs never ended: the timeout killed it.
	wantLine(t, sum, "tests: run=2 skipped=0 allowed_skips=0")
	err := sum.err(false)
	if err == nil {
		t.Fatal("a test killed by the timeout passes")
	}
	contains(t, "the error", err.Error(), "example.com/fix/hang TestHangs (did not finish)")
	contains(t, "the report", out, "waiting for an answer that never comes", "panic: test timed out after 2s")
}

func TestNoTestFiles(t *testing.T) {
	sum, out := reportOf(t, allowList{}, "notests", "pass")
	wantLine(t, sum, "tests: run=4 skipped=0 allowed_skips=0")
	if err := sum.err(true); err != nil {
		t.Errorf("a package without tests fails the run: %v", err)
	}
	if strings.Contains(out, "notests") {
		t.Errorf("the report names a package without tests:\n%s", out)
	}
	if _, err := report(strings.NewReader(""), &bytes.Buffer{}, allowList{}); err != nil {
		t.Fatal(err)
	}
	if sum, _ := report(strings.NewReader(""), &bytes.Buffer{}, allowList{}); sum.err(false) == nil {
		t.Error("an empty stream passes")
	}
}

// An allow-list line whose test no package reported fails under CI only.
func TestStaleEntry(t *testing.T) {
	allow := allowOf(t, "example.com/fix/pass TestRenamed it used to need a second node")
	sum, _ := reportOf(t, allow, "pass")
	if err := sum.err(false); err != nil {
		t.Errorf("a stale entry fails outside CI: %v", err)
	}
	err := sum.err(true)
	if err == nil {
		t.Fatal("a stale entry passes under CI")
	}
	contains(t, "the error", err.Error(), "example.com/fix/pass TestRenamed")
}

func TestAllowListErrors(t *testing.T) {
	for _, tc := range []struct{ list, want string }{
		{"example.com/x TestA", "test:1: example.com/x TestA has no reason"},
		{"# c\nTestA example.com/x because", "test:2: \"TestA example.com/x because\": want <package> <test> <reason>"},
		{"example.com/x", "test:1: \"example.com/x\": want <package> <test> <reason>"},
		{"example.com/x TestA why\nexample.com/x TestA why again", "test:2: example.com/x TestA is listed twice"},
	} {
		_, err := parseAllowList("test", strings.NewReader(tc.list))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want %q", tc.list, err, tc.want)
		}
	}
	// The repository's own list parses.
	f, err := os.Open("allowed-skips.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := parseAllowList("allowed-skips.txt", f); err != nil {
		t.Error(err)
	}
}

// fakeGoDir returns a directory for a fake go command, an empty allow-list in it, and the
// stream of a passing run, for tests of run.
func fakeGoDir(t *testing.T) (dir, allow, passing string) {
	t.Helper()
	dir = t.TempDir()
	allow = filepath.Join(dir, "allow")
	if err := os.WriteFile(allow, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	passing, err := filepath.Abs(filepath.Join("testdata", "pass.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	return dir, allow, passing
}

// run fails when go test fails even if its stream looks clean, and passes the counts line on.
func TestRunExitStatus(t *testing.T) {
	dir, allow, passing := fakeGoDir(t)
	for status, wantErr := range map[string]bool{"0": false, "2": true} {
		fakeGo := filepath.Join(dir, "go"+status)
		script := "#!/bin/sh\n[ \"$1 $2\" = 'test -json' ] || exit 9\ncat " + passing + "\nexit " + status + "\n"
		if err := os.WriteFile(fakeGo, []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
		var stdout, stderr bytes.Buffer
		line, err := run(fakeGo, []string{"./..."}, allow, true, leakCheck{processes: true, grace: time.Second}, &stdout, &stderr)
		if line != "tests: run=4 skipped=0 allowed_skips=0" || (err != nil) != wantErr {
			t.Errorf("go test exiting %s: %q, %v; want an error: %v", status, line, err, wantErr)
		}
	}
}

func TestSlowest(t *testing.T) {
	events := strings.Join([]string{
		`{"Action":"pass","Package":"p","Test":"TestQuick","Elapsed":0.5}`,
		`{"Action":"pass","Package":"p","Test":"TestSlow/sub","Elapsed":90}`,
		`{"Action":"pass","Package":"p","Test":"TestSlow","Elapsed":91.25}`,
		`{"Action":"fail","Package":"q","Test":"TestMiddle","Elapsed":12}`,
		`{"Action":"fail","Package":"q","Elapsed":12.1}`,
		`{"Action":"pass","Package":"p","Elapsed":92}`,
	}, "\n") + "\n"
	sum, err := report(strings.NewReader(events), &bytes.Buffer{}, allowList{})
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(sum.slowest(2), ", ")
	if want := "p TestSlow 91.2s, q TestMiddle 12.0s"; got != want {
		t.Errorf("slowest(2) = %q, want %q (top-level tests only, longest first)", got, want)
	}
	if n := len(sum.slowest(10)); n != 3 {
		t.Errorf("slowest(10) lists %d tests, want the 3 there are", n)
	}
}

// A process the tests leave running fails the run, is named, and is killed, even when it left
// its parent behind (reparented to testreport rather than to init).
func TestRunLeftoverProcess(t *testing.T) {
	dir, allow, passing := fakeGoDir(t)
	pidFile := filepath.Join(dir, "pid")
	fakeGo := filepath.Join(dir, "go")
	// The subshell exits at once, so the sleep is an orphan of a process that is gone.
	script := "#!/bin/sh\n(setsid sleep 300 </dev/null >/dev/null 2>&1 & echo $! >" + pidFile + ")\ncat " + passing + "\n"
	if err := os.WriteFile(fakeGo, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	line, err := run(fakeGo, []string{"./..."}, allow, true, leakCheck{processes: true, grace: time.Second}, &stdout, &stderr)
	t.Logf("output:\n%s", stdout.String())
	if line != "tests: run=4 skipped=0 allowed_skips=0" || err == nil {
		t.Fatalf("run = %q, %v; want the counts and an error for the process left", line, err)
	}
	b, rerr := os.ReadFile(pidFile)
	if rerr != nil {
		t.Fatal(rerr)
	}
	pid := strings.TrimSpace(string(b))
	contains(t, "the output", stdout.String(), "left behind by the tests: process "+pid+" sleep (sleep 300): killed")
	if _, serr := os.Stat("/proc/" + pid); serr == nil {
		t.Errorf("process %s is still there after the run", pid)
	}
}
