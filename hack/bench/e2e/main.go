// Command e2e runs one scenario of test/e2e on real local instances (or, with -pkg, an integration
// test of another package) as a benchmark (make bench-failover, make bench-autoscale, make bench-ha,
// make bench-global): it runs the named test once, shows its output, and prints the figures the test
// logged as the last line, e.g.
//
//	failover: failed_requests=<int> ejection_ms=<int> replacement_ready_s=<float>
//	autoscale: decision_s=<float> new_capacity_serving_s=<float> warm_pool_serving_s=<float>
//	ha: takeover_s=<float> failed_requests=<int> lost_acked_writes=<int> orphans=<int> duplicates=<int>
//	global: dns_withdraw_s=<float> dns_return_s=<float> front_failed_requests=<int> front_failover_ms=<int>
//	regions: partition_failed_requests=<int> detect_unreachable_s=<float> cp_down_failed_requests=<int> wave_stopped=<true|false>
//	tenancy: cold_first_answer_ms=<float> cross_tenant_answers=<int> isolation_p99_ratio=<float>
//
// The scenarios need root and the host dependencies (make deps, make kubernetes). It exits non-zero
// when the test fails or is skipped, after printing the figures if the test measured them.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"regexp"
	"strings"
	"syscall"
	"time"
)

func main() {
	test := flag.String("test", "", "the test/e2e test to run, e.g. TestIntegrationFailover")
	name := flag.String("figures", "", "the word that starts the figures line, e.g. failover")
	env := flag.String("env", "", "an extra environment variable for the test, KEY=VALUE")
	pkg := flag.String("pkg", "./test/e2e", "the package of the test")
	tags := flag.String("tags", "", "build tags the test needs, e.g. tenancy")
	flag.Parse()
	if *test == "" || *name == "" {
		fail("bench", fmt.Errorf("-test and -figures are required"))
	}
	// "<name>: key=value key=value ...", numbers and booleans only.
	figures := regexp.MustCompile(regexp.QuoteMeta(*name) + `:( [a-z][a-z0-9_]*=(-?[0-9.]+|true|false))+`)

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	args := []string{"test", "-count=1", "-v", "-timeout", "20m"}
	if *tags != "" {
		args = append(args, "-tags", *tags)
	}
	cmd := exec.CommandContext(ctx, "go", append(args, "-run", "^"+*test+"$", *pkg)...)
	if *env != "" {
		cmd.Env = append(os.Environ(), *env)
	}
	// On Ctrl-C or SIGTERM the test binary gets SIGINT, not SIGKILL, so that its cleanups run
	// (localtest.CleanupOnInterrupt) before it exits. go test runs in a process group of its own
	// and the whole group gets it: the go command itself waits on SIGINT for the test binary,
	// which is the one that must see the signal.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGINT) }
	// The cleanups delete fleets of real instances: give them time before SIGKILL.
	cmd.WaitDelay = 5 * time.Minute
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		fail(*name, err)
	}
	if err := cmd.Start(); err != nil {
		fail(*name, err)
	}
	line, skipped := "", false
	sc := bufio.NewScanner(io.TeeReader(out, os.Stderr))
	for sc.Scan() {
		if m := figures.FindString(sc.Text()); m != "" {
			line = m
		}
		if strings.Contains(sc.Text(), "--- SKIP: "+*test) {
			skipped = true
		}
	}
	err = cmd.Wait()
	switch {
	case skipped:
		err = fmt.Errorf("%s was skipped (see above; run as root after make deps and make kubernetes)", *test)
	case err != nil:
		err = fmt.Errorf("%s failed: %w", *test, err)
	case line == "":
		err = fmt.Errorf("%s printed no figures", *test)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench-%s: %v\n", *name, err)
	}
	// The figures come last, also when the test failed on them.
	if line != "" {
		fmt.Println(line)
	}
	if err != nil {
		os.Exit(1)
	}
}

func fail(name string, err error) {
	fmt.Fprintf(os.Stderr, "bench-%s: %v\n", name, err)
	os.Exit(1)
}
