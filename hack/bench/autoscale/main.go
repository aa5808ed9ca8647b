// Command autoscale benchmarks herd's autoscaling on real local instances (make bench-autoscale):
// it runs TestIntegrationBenchAutoscale of test/e2e once, which starts herd up with the local
// provider, applies a fleet of the hello example autoscaled on requests per second, steps the load
// through herd's load balancer from about 1x to 4x the target, and measures:
//
//   - decision_s: load step -> spec.replicas.desired raised (polled with herd get fleets -o json);
//   - new_capacity_serving_s: load step -> a newly created instance answering through the LB;
//   - warm_pool_serving_s: the same with spec.autoscaling.warmPool 1 -> the warm instance answering.
//
// It deletes the fleet, stops herd up and checks that nothing is left on the host. Its last line is
//
//	autoscale: decision_s=<float> new_capacity_serving_s=<float> warm_pool_serving_s=<float>
//
// It needs root and the host dependencies (make deps, make kubernetes), and exits non-zero when the
// run fails, after printing the figures if it measured them.
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

var figures = regexp.MustCompile(`autoscale: decision_s=-?[0-9.]+ new_capacity_serving_s=-?[0-9.]+ warm_pool_serving_s=-?[0-9.]+`)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	cmd := exec.CommandContext(ctx, "go", "test", "-count=1", "-v", "-timeout", "20m",
		"-run", "^TestIntegrationBenchAutoscale$", "./test/e2e")
	cmd.Env = append(os.Environ(), "HERD_BENCH_AUTOSCALE=1") // the test skips without it
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
		if strings.Contains(sc.Text(), "--- SKIP: TestIntegrationBenchAutoscale") {
			skipped = true
		}
	}
	err = cmd.Wait()
	switch {
	case skipped:
		err = fmt.Errorf("the benchmark was skipped (see above; run as root after make deps and make kubernetes)")
	case err != nil:
		err = fmt.Errorf("the benchmark failed: %w", err)
	case line == "":
		err = fmt.Errorf("the benchmark printed no figures")
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench-autoscale:", err)
	}
	if line != "" {
		fmt.Println(line)
	}
	if err != nil {
		os.Exit(1)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "bench-autoscale:", err)
	os.Exit(1)
}
