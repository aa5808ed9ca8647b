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
// Last, it fails when the run left something behind (leaks.go): a process, which it names and
// kills, or a network namespace or mount that appeared during the run (-leaks=false turns the
// check off, for a machine where other work makes namespaces meanwhile).
//
// The allow-list (-allow, hack/testreport/allowed-skips.txt) has one test a line: the package, the
// test (TestA/sub for a subtest), and why it may skip.
//
// Usage: go run ./hack/testreport [-allow FILE] [-go GO] -- [go test flags and packages]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

func main() {
	allowPath := flag.String("allow", "hack/testreport/allowed-skips.txt", "the allow-list of tests that may skip")
	goTool := flag.String("go", "go", "the go command")
	checkLeaks := flag.Bool("leaks", true, "fail when the run leaves a process, network namespace or mount behind")
	flag.Parse()
	ci, _ := strconv.ParseBool(os.Getenv("CI"))
	leaks := leakCheck{}
	if *checkLeaks {
		leaks = leakCheck{processes: true, host: true, grace: leftoverGrace}
	}
	line, err := run(*goTool, flag.Args(), *allowPath, ci, leaks, os.Stdout, os.Stderr)
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

// leakCheck says what the leak check (leaks.go) looks at.
type leakCheck struct {
	processes bool          // the processes the run left
	host      bool          // the network namespaces and mounts that appeared during it
	grace     time.Duration // how long processes on their way out get to go
}

// run runs goTool test -json with args, reports on its stream to stdout and returns the counts
// line, and why the run failed or nil. Under ci, stale allow-list entries fail it too. leaks says
// what the run must not leave behind.
func run(goTool string, args []string, allowPath string, ci bool, leaks leakCheck, stdout, stderr io.Writer) (string, error) {
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
	before := snapshotHost()
	if leaks.processes {
		if err := becomeSubreaper(); err != nil {
			return "", fmt.Errorf("the leak check: become the subreaper of the tests' processes: %w", err)
		}
	}
	if err := cmd.Start(); err != nil {
		return "", fmt.Errorf("start %s test: %w", goTool, err)
	}
	reaping, stopReaping := context.WithCancel(context.Background())
	defer stopReaping()
	if leaks.processes {
		go reapOrphans(reaping, cmd.Process.Pid)
	}
	sum, readErr := report(events, stdout, allow)
	if slow := sum.slowest(10); len(slow) > 0 {
		fmt.Fprintf(stdout, "slowest tests: %s\n", strings.Join(slow, ", "))
	}
	// The stream may have read through; drain it so that go test is never blocked writing.
	io.Copy(io.Discard, events)
	waitErr := cmd.Wait()
	stopReaping()
	errs := []error{readErr, sum.err(ci)}
	if waitErr != nil {
		errs = append(errs, fmt.Errorf("%s test: %w", goTool, waitErr))
	}
	if leaks.processes {
		found := leftovers(before, leaks.host, leaks.grace)
		for _, f := range found {
			fmt.Fprintln(stdout, "left behind by the tests:", f)
		}
		if len(found) > 0 {
			errs = append(errs, fmt.Errorf("the tests left %d things behind (listed above)", len(found)))
		}
	}
	return sum.line(), errors.Join(errs...)
}
