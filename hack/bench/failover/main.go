// Command failover benchmarks herd's failover on real local instances (make bench-failover): it
// runs the end-to-end test TestIntegrationFailover (test/e2e) once, which kills -9 one of three
// instances of the hello example under steady load through herd's load balancer, shows its
// output, and prints its figures as the last line:
//
//	failover: failed_requests=<int> ejection_ms=<int> replacement_ready_s=<float>
//
// It needs root and the host dependencies (make deps, make kubernetes). It exits non-zero when
// the test fails or is skipped, after printing the figures if the test measured them.
package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"regexp"
	"strings"
	"syscall"
)

var figures = regexp.MustCompile(`failover: failed_requests=-?\d+ ejection_ms=-?\d+ replacement_ready_s=-?[0-9.]+`)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	cmd := exec.CommandContext(ctx, "go", "test", "-count=1", "-v", "-timeout", "20m",
		"-run", "^TestIntegrationFailover$", "./test/e2e")
	// On Ctrl-C the test binary gets SIGINT, not SIGKILL, so that its cleanup runs.
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGINT) }
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		fail(err)
	}
	if err := cmd.Start(); err != nil {
		fail(err)
	}
	line, skipped := "", false
	sc := bufio.NewScanner(io.TeeReader(out, os.Stderr))
	for sc.Scan() {
		if m := figures.FindString(sc.Text()); m != "" {
			line = m
		}
		if strings.Contains(sc.Text(), "--- SKIP: TestIntegrationFailover") {
			skipped = true
		}
	}
	err = cmd.Wait()
	switch {
	case skipped:
		err = fmt.Errorf("the failover test was skipped (see above; run as root after make deps and make kubernetes)")
	case err != nil:
		err = fmt.Errorf("the failover test failed: %w", err)
	case line == "":
		err = fmt.Errorf("the failover test printed no figures")
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench-failover:", err)
	}
	// The figures come last, also when the test failed on them.
	if line != "" {
		fmt.Println(line)
	}
	if err != nil {
		os.Exit(1)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "bench-failover:", err)
	os.Exit(1)
}
