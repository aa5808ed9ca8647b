// Command conformance runs the upstream Kubernetes conformance suite of the pinned version against
// one real local instance (make conformance):
//
//  1. builds the test images the [Conformance] tests use (internal/conformance) and bakes them into
//     a node image, so that the instance has them already: nothing can be pulled;
//
//  2. boots one instance of it with the local provider, holding the machine-wide lock of the
//     integration tests, and takes its administrator kubeconfig;
//
//  3. runs e2e.test (built by hack/conformance/suite/build.sh) under the ginkgo CLI, in parallel
//     where the suite allows ([Serial] tests run alone at the end), with the skips a one-node
//     cluster needs;
//
//  4. reads the suite's JUnit report and prints every failure with its reason, the tests skipped
//     and why, and as its last line:
//
//     conformance: passed=<int> failed=<int> skipped=<int> total=<int>
//
// The instance and its data directory are removed on exit, also on Ctrl-C; the report directory
// (e2e.log, junit_01.xml) is kept and named. It exits 0 when the suite ran, whatever its results,
// and 1 when it could not run.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"herd.dev/herd/internal/conformance"
	"herd.dev/herd/internal/image"
	"herd.dev/herd/internal/kubebin"
	"herd.dev/herd/internal/provider"
	"herd.dev/herd/internal/provider/local"
	"herd.dev/herd/internal/provider/local/localtest"
)

// oneNodeSkips are the [Conformance] tests that cannot pass on a cluster of one node, with why.
var oneNodeSkips = map[string]string{
	`should have at least two untainted nodes`:     "asserts the cluster has two schedulable nodes",
	`should rollback without unnecessary restarts`: "the DaemonSet rollback test asserts more than one schedulable node",
}

func main() {
	herd := flag.String("herd", "bin/herd", "the herd binary the instance runs its agent with (make build)")
	focus := flag.String("focus", `\[Conformance\]`, "regular expression of the tests to run (ginkgo --focus)")
	skip := flag.String("skip", "", "regular expression of further tests to leave out (ginkgo --skip), besides the one-node skips")
	procs := flag.Int("procs", 4, "ginkgo processes running tests in parallel; [Serial] tests run alone")
	timeout := flag.Duration("timeout", 6*time.Hour, "how long the suite may run in all")
	reportDir := flag.String("report-dir", "", "where e2e.log and the JUnit report go (default: a new directory under $TMPDIR, kept)")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), `Runs the upstream conformance suite of Kubernetes %s against one real local instance.

Examples:
  make conformance                                     # the whole suite: hours on 2 cores
  go run ./hack/conformance -focus 'Pods should be submitted and removed.*\[Conformance\]'

Flags:
`, kubebin.Version)
		flag.PrintDefaults()
	}
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	line, err := run(ctx, options{herd: *herd, focus: *focus, skip: *skip, procs: *procs, timeout: *timeout, reportDir: *reportDir})
	if err != nil {
		fmt.Fprintln(os.Stderr, "conformance:", err)
		os.Exit(1)
	}
	fmt.Println(line)
}

type options struct {
	herd, focus, skip, reportDir string
	procs                        int
	timeout                      time.Duration
}

func run(ctx context.Context, o options) (string, error) {
	if o.procs < 1 {
		return "", errors.New("-procs must be at least 1")
	}
	bin, err := kubebin.BinDir()
	if err != nil {
		return "", err
	}
	for _, f := range []string{"e2e.test", "ginkgo", "agnhost", "nnp", "sample-apiserver"} {
		if _, err := os.Stat(filepath.Join(bin, f)); err != nil {
			return "", fmt.Errorf("%s is not built: run hack/conformance/suite/build.sh (make conformance does): %w", f, err)
		}
	}
	herdBin, err := filepath.Abs(o.herd)
	if err != nil {
		return "", err
	}
	if err := local.CheckHost(herdBin); err != nil {
		return "", err
	}
	module, err := kubernetesModule()
	if err != nil {
		return "", err
	}
	if o.reportDir == "" {
		if o.reportDir, err = os.MkdirTemp("", "herd-conformance-"); err != nil {
			return "", err
		}
	} else if err := os.MkdirAll(o.reportDir, 0o755); err != nil {
		return "", err
	}
	// Short: containerd's sockets live under it, and a unix socket path has at most 104 bytes.
	dataDir, err := os.MkdirTemp("", "hcf-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dataDir)

	fmt.Println("building the test images")
	start := time.Now()
	imagesDir := filepath.Join(dataDir, "nodeimage")
	files, err := conformance.BuildImages(conformance.Sources{Bin: bin, Module: module}, imagesDir, func(s string) { fmt.Println("  " + s) })
	if err != nil {
		return "", err
	}
	nodeImage, err := writeNodeImage(imagesDir, files)
	if err != nil {
		return "", err
	}
	b, err := image.Build(ctx, nodeImage, image.NewStore(image.StoreDir(dataDir)), func(s string) { fmt.Println("  " + s) })
	if err != nil {
		return "", err
	}
	if err := os.RemoveAll(imagesDir); err != nil { // the bundle holds its own copies
		return "", err
	}
	fmt.Printf("node image %s built in %.0f s\n", b.ShortDigest(), time.Since(start).Seconds())

	fmt.Println("waiting for the machine-wide lock on real instances")
	unlock, err := localtest.Lock(ctx)
	if err != nil {
		return "", err
	}
	defer unlock()
	p, err := local.New(local.Options{DataDir: dataDir, HerdBinary: herdBin})
	if err != nil {
		return "", err
	}
	name := fmt.Sprintf("conformance-%d", os.Getpid())
	defer func() {
		fmt.Println("deleting", name)
		if err := p.Delete(context.Background(), name); err != nil {
			fmt.Fprintln(os.Stderr, "conformance: cleanup:", err)
		}
	}()
	start = time.Now()
	in, err := p.Create(ctx, provider.InstanceSpec{Name: name, Image: b.Digest, Region: "conformance"})
	if err != nil {
		return "", err
	}
	if err := waitReady(ctx, p, name, 5*time.Minute); err != nil {
		return "", err
	}
	fmt.Printf("instance %s at %s Ready in %.1f s\n", name, in.Address, time.Since(start).Seconds())
	kc, err := p.Kubeconfig(ctx, name)
	if err != nil {
		return "", err
	}
	kubeconfig := filepath.Join(dataDir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, kc, 0o600); err != nil {
		return "", err
	}

	if err := runSuite(ctx, o, bin, kubeconfig); err != nil {
		return "", err
	}
	f, err := os.Open(filepath.Join(o.reportDir, "junit_01.xml"))
	if err != nil {
		return "", fmt.Errorf("the suite wrote no JUnit report (see %s): %w", filepath.Join(o.reportDir, "e2e.log"), err)
	}
	defer f.Close()
	s, err := conformance.ParseJUnit(f)
	if err != nil {
		return "", err
	}
	printSummary(os.Stdout, s, o.reportDir)
	if ctx.Err() != nil {
		return "", fmt.Errorf("interrupted: the counts are of the tests that ran before; %s", s.Line())
	}
	return s.Line(), nil
}

// runSuite runs e2e.test under the ginkgo CLI, its output both to stdout and to e2e.log in the
// report directory. The suite failing tests is not an error: the report says which.
func runSuite(ctx context.Context, o options, bin, kubeconfig string) error {
	skips := make([]string, 0, len(oneNodeSkips)+1)
	for t := range oneNodeSkips {
		skips = append(skips, t)
	}
	sort.Strings(skips)
	if o.skip != "" {
		skips = append(skips, o.skip)
	}
	args := []string{
		"--procs", fmt.Sprint(o.procs), "--timeout", o.timeout.String(), "--no-color", "--silence-skips",
		"--focus", o.focus, "--skip", strings.Join(skips, "|"),
		filepath.Join(bin, "e2e.test"), "--",
		"--kubeconfig", kubeconfig, "--provider", "skeleton", "--report-dir", o.reportDir,
		"--kubectl-path", filepath.Join(bin, "kubectl"), "--disable-log-dump",
	}
	log, err := os.Create(filepath.Join(o.reportDir, "e2e.log"))
	if err != nil {
		return err
	}
	defer log.Close()
	fmt.Printf("running the suite (%d processes, log %s):\n  ginkgo %s\n", o.procs, log.Name(), strings.Join(args, " "))
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "ginkgo"), args...)
	cmd.Dir = o.reportDir
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
	cmd.Stdout = io.MultiWriter(os.Stdout, log)
	cmd.Stderr = cmd.Stdout
	// Interrupted, ginkgo is asked to stop with SIGINT, after which it may still write the report
	// of what ran; it is killed if it has not finished 3 minutes later, and then there is no
	// report (seen once: it went on running [Serial] tests until killed).
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 3 * time.Minute
	start := time.Now()
	err = cmd.Run()
	fmt.Printf("the suite ran for %s\n", time.Since(start).Round(time.Second))
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		return fmt.Errorf("running ginkgo: %w", err)
	}
	return nil
}

func printSummary(w io.Writer, s conformance.Summary, reportDir string) {
	for _, r := range s.SuiteFailures {
		fmt.Fprintf(w, "SUITE FAILURE %s\n  %s\n", r.Name, r.Reason)
	}
	for _, r := range s.Failures {
		fmt.Fprintf(w, "FAIL %s\n  %s\n", r.Name, r.Reason)
	}
	unselected := 0
	for _, r := range s.Skips {
		why := r.Reason
		for t, reason := range oneNodeSkips {
			if strings.Contains(r.Name, t) {
				why = "one node: " + reason
			}
		}
		if why == "skipped" { // left out by -focus or -skip, not by the test itself
			unselected++
			continue
		}
		fmt.Fprintf(w, "SKIP %s\n  %s\n", r.Name, why)
	}
	if unselected > 0 {
		fmt.Fprintf(w, "%d more [Conformance] tests skipped: not selected by -focus and -skip\n", unselected)
	}
	fmt.Fprintf(w, "report: %s\n", reportDir)
}

// waitReady polls the instance until the provider reports it Ready, failing early when Failed.
func waitReady(ctx context.Context, p *local.Provider, name string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		in, err := p.Get(ctx, name)
		if err == nil && in.State == provider.StateReady {
			return nil
		}
		if err == nil && in.State == provider.StateFailed {
			return fmt.Errorf("%s failed to boot: %s", name, in.Reason)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s was not Ready within %s (last: %+v, %v)", name, timeout, in, err)
		}
		select {
		case <-time.After(500 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// kubernetesModule is the k8s.io/kubernetes module of the pinned version in Go's module cache,
// which hack/conformance/suite/build.sh downloaded.
func kubernetesModule() (string, error) {
	out, err := exec.Command("go", "env", "GOMODCACHE").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMODCACHE: %w", err)
	}
	dir := filepath.Join(strings.TrimSpace(string(out)), "k8s.io", "kubernetes@"+kubebin.Version)
	if _, err := os.Stat(filepath.Join(dir, "test", "images")); err != nil {
		return "", fmt.Errorf("the k8s.io/kubernetes module is not in the module cache (hack/conformance/suite/build.sh downloads it): %w", err)
	}
	return dir, nil
}

// writeNodeImage writes the NodeImage that bakes the test images in, next to them, with one
// ConfigMap as its manifests (a NodeImage needs some), and returns its file.
func writeNodeImage(dir string, files map[string]string) (string, error) {
	refs := make([]string, 0, len(files))
	for ref := range files {
		refs = append(refs, ref)
	}
	sort.Strings(refs)
	var y strings.Builder
	y.WriteString("apiVersion: herd.dev/v1alpha1\nkind: NodeImage\nmetadata:\n  name: conformance\nspec:\n  manifests: manifests\n  images:\n")
	for _, ref := range refs {
		fmt.Fprintf(&y, "  - {name: %q, tar: %q}\n", ref, filepath.Base(files[ref]))
	}
	cm := "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: herd-conformance\n  namespace: default\ndata:\n  images: |\n"
	for _, ref := range refs {
		cm += "    " + ref + "\n"
	}
	if err := os.MkdirAll(filepath.Join(dir, "manifests"), 0o755); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, "manifests", "conformance.yaml"), []byte(cm), 0o644); err != nil {
		return "", err
	}
	file := filepath.Join(dir, "image.yaml")
	return file, os.WriteFile(file, []byte(y.String()), 0o644)
}
