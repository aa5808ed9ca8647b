// Command testreport runs go test -json for make test and reports on it: it prints what go test
// prints without -v (each package's result line and the whole output of every test that failed),
// one line for each skip on the allow-list, the whole output of every other skip, and last
//
//	tests: run=<int> skipped=<int> allowed_skips=<int>
//
// Every test and every subtest counts once: run is those that passed or failed (a test cut short
// by a timeout or a panic counts as failed), skipped those that skipped, allowed_skips those of
// the skips that the allow-list names. It exits non-zero when a test or a build failed, when go
// test itself failed, and when a test skipped that the allow-list does not name (skipped >
// allowed_skips): a test that skips has not passed. Under CI (CI=true) it also fails on an
// allow-list line that names no test that reported, so that the list cannot outlive its tests.
//
// The allow-list (-allow, hack/testreport/allowed-skips.txt) has one test a line: the package, the
// test (TestA/sub for a subtest), and why it may skip.
//
// Usage: go run ./hack/testreport [-allow FILE] [-go GO] -- [go test flags and packages]
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
)

func main() {
	allowPath := flag.String("allow", "hack/testreport/allowed-skips.txt", "the allow-list of tests that may skip")
	goTool := flag.String("go", "go", "the go command")
	flag.Parse()
	ci, _ := strconv.ParseBool(os.Getenv("CI"))
	line, err := run(*goTool, flag.Args(), *allowPath, ci, os.Stdout, os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stdout, "testreport:", err)
	}
	if line != "" {
		fmt.Fprintln(os.Stdout, line)
	}
	if err != nil {
		os.Exit(1)
	}
}

// run runs goTool test -json with args, reports on its stream to stdout and returns the counts
// line, and why the run failed or nil. Under ci, stale allow-list entries fail it too.
func run(goTool string, args []string, allowPath string, ci bool, stdout, stderr io.Writer) (string, error) {
	f, err := os.Open(allowPath)
	if err != nil {
		return "", fmt.Errorf("the allow-list of skips: %w", err)
	}
	allow, err := parseAllowList(allowPath, f)
	f.Close()
	if err != nil {
		return "", err
	}
	cmd := exec.Command(goTool, append([]string{"test", "-json"}, args...)...)
	cmd.Stderr = stderr
	events, err := cmd.StdoutPipe()
	if err != nil {
		return "", err
	}
	if err := cmd.Start(); err != nil {
		return "", fmt.Errorf("start %s test: %w", goTool, err)
	}
	sum, readErr := report(events, stdout, allow)
	if slow := sum.slowest(10); len(slow) > 0 {
		fmt.Fprintf(stdout, "slowest tests: %s\n", strings.Join(slow, ", "))
	}
	// The stream may have read through; drain it so that go test is never blocked writing.
	io.Copy(io.Discard, events)
	waitErr := cmd.Wait()
	errs := []error{readErr, sum.err(ci)}
	if waitErr != nil {
		errs = append(errs, fmt.Errorf("%s test: %w", goTool, waitErr))
	}
	return sum.line(), errors.Join(errs...)
}
