// Command testdisk proves herd image disk end to end (make test-disk): it builds the hello
// example's node image and its disk, builds the disk a second time and checks that both have the
// same digest, then boots the disk under QEMU (UEFI firmware from Debian's ovmf, KVM where
// /dev/kvm exists, else TCG, and TCG again when KVM fails to run it) with a NoCloud seed naming the instance, forwards a host port to the
// hello app's NodePort and one to the agent's endpoints, and waits until the agent's /readyz
// answers 200 and the app answers from the host. The machine's disk is 2 GiB bigger than the
// image: the root file system must have grown to its end at boot.
//
// It runs as root on a work directory of its own and removes it, and stops QEMU, on exit, also
// on Ctrl-C and SIGTERM. The guest's console is written to <work>/console.log and printed when the
// boot fails. The last line is:
//
//	disk: size_mb=<int> allocated_mb=<int> boot_to_serving_s=<float> accel=<kvm|tcg>
package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"

	"herd.dev/herd/internal/disk"
)

const (
	appPort   = 30080 // the hello app's NodePort (examples/hello)
	agentPort = 10260 // the agent's endpoints
	firmware  = "/usr/share/ovmf/OVMF.fd"
)

func main() {
	herd := flag.String("herd", "bin/herd", "the herd binary, with herd-agent beside it (make build)")
	nodeImage := flag.String("image", "examples/hello/image.yaml", "the NodeImage to build a disk of")
	twice := flag.Bool("twice", true, "build the disk twice and compare the digests")
	bootTimeout := flag.Duration("boot-timeout", 45*time.Minute, "how long the booted disk may take to serve")
	keep := flag.Bool("keep", false, "keep the work directory (the disks, the console log)")
	existing := flag.String("disk", "", "boot this disk instead of building one (no digest comparison)")
	flag.Parse()
	signal.Ignore(syscall.SIGPIPE)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	line, err := run(ctx, *herd, *nodeImage, *existing, *twice, *bootTimeout, *keep)
	if err != nil {
		fmt.Fprintln(os.Stderr, "test-disk:", err)
		os.Exit(1)
	}
	fmt.Println(line)
}

func run(ctx context.Context, herd, nodeImage, existing string, twice bool, bootTimeout time.Duration, keep bool) (string, error) {
	work, err := os.MkdirTemp("/var/tmp", "herd-test-disk-")
	if err != nil {
		return "", err
	}
	if keep {
		fmt.Fprintln(os.Stderr, "work directory:", work)
	} else {
		defer os.RemoveAll(work)
	}
	var first built
	if existing != "" {
		first, err = describe(existing)
	} else {
		first, err = buildDisks(ctx, herd, nodeImage, work, twice)
	}
	if err != nil {
		return "", err
	}

	seed := filepath.Join(work, "seed.img")
	// The test is herd up here: it gives the instance its credential and carries it to the agent.
	credential := rand.Text()
	userData := "#herd\nname: disk-test\nreadyTimeout: " + bootTimeout.String() + "\ncredential: " + credential + "\n"
	if err := disk.Seed(ctx, seed, []byte(userData), []byte("instance-id: disk-test\n")); err != nil {
		return "", fmt.Errorf("seed: %w", err)
	}
	accel := "tcg"
	if _, err := os.Stat("/dev/kvm"); err == nil {
		accel = "kvm"
	}
	// The boot timeout bounds both boots, so that a KVM that fails late leaves TCG only what is left.
	bootCtx, cancel := context.WithTimeout(ctx, bootTimeout)
	defer cancel()
	took, err := boot(bootCtx, first, work, seed, credential, accel)
	if errors.Is(err, errKVM) {
		// A nested KVM (a machine that is a VM itself) may fail on the firmware's first
		// instructions; QEMU then pauses the machine rather than exit. TCG runs anything.
		fmt.Fprintln(os.Stderr, "KVM could not run the machine: booting again under TCG")
		accel = "tcg"
		took, err = boot(bootCtx, first, work, seed, credential, accel)
	}
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("disk: size_mb=%d allocated_mb=%d boot_to_serving_s=%.1f accel=%s", first.size>>20, first.allocated>>20, took.Seconds(), accel), nil
}

// errKVM is a boot that QEMU could not run under KVM.
var errKVM = errors.New("KVM could not run the machine")

// kvmFailures are what QEMU prints when KVM cannot run the machine: an internal error (QEMU
// then pauses the machine rather than exit), or a model-specific register the host's KVM
// refuses, after which QEMU aborts, and an abort under a nested KVM may never finish exiting.
var kvmFailures = [][]byte{[]byte("KVM internal error"), []byte("failed to set MSR")}

// kvmWatch passes QEMU's output on and closes failed when QEMU reports that KVM failed.
type kvmWatch struct {
	out    io.Writer
	failed chan struct{}
	seen   []byte // the output's last bytes, for a report split across writes
	once   sync.Once
}

func (w *kvmWatch) Write(p []byte) (int, error) {
	w.seen = append(w.seen, p...)
	for _, failure := range kvmFailures {
		if bytes.Contains(w.seen, failure) {
			w.once.Do(func() { close(w.failed) })
		}
	}
	if n := len(w.seen); n > 64 {
		w.seen = w.seen[n-64:]
	}
	return w.out.Write(p)
}

// boot boots a copy of the disk under QEMU with the seed and waits until it serves. It copies
// the disk afresh, so that a second boot starts from the image as built. ctx bounds the wait.
func boot(ctx context.Context, first built, work, seed, credential, accel string) (time.Duration, error) {
	// The machine's disk is bigger than the image, as an AMI's volume may be: a sparse copy with
	// grow more at its end, where the root must grow to at first boot. The disk stays as built.
	boot := filepath.Join(work, "boot.raw")
	if err := growCopy(ctx, first.path, boot, grow); err != nil {
		return 0, err
	}
	appHost, agentHost := freePort(), freePort()
	console := filepath.Join(work, "console.log")
	cpu := "max"
	if accel == "kvm" {
		// Without arch-capabilities QEMU does not set IA32_ARCH_CAPABILITIES (MSR 0x10a), which
		// a nested KVM may refuse, aborting QEMU; the guest needs none of what it reports.
		cpu = "host,arch-capabilities=off"
	}
	args := []string{
		"-machine", "q35,accel=" + accel, "-cpu", cpu, "-smp", "2", "-m", "4096",
		"-bios", firmware, "-display", "none", "-no-reboot",
		"-serial", "file:" + console, "-monitor", "none",
		"-drive", "file=" + boot + ",format=raw,if=virtio",
		"-drive", "file=" + seed + ",format=raw,if=virtio,readonly=on",
		"-netdev", fmt.Sprintf("user,id=net0,hostfwd=tcp:127.0.0.1:%d-:%d,hostfwd=tcp:127.0.0.1:%d-:%d", appHost, appPort, agentHost, agentPort),
		"-device", "virtio-net-pci,netdev=net0",
	}
	qemu := exec.Command("qemu-system-x86_64", args...)
	watch := &kvmWatch{out: os.Stderr, failed: make(chan struct{})}
	qemu.Stdout, qemu.Stderr = watch, watch
	qemu.WaitDelay = 5 * time.Second // Wait returns when QEMU has exited, whoever holds its output open
	start := time.Now()
	if err := qemu.Start(); err != nil {
		return 0, fmt.Errorf("qemu: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- qemu.Wait() }()
	defer stopQEMU(qemu.Process, exited)
	fmt.Fprintf(os.Stderr, "booting %s under QEMU (%s), app on 127.0.0.1:%d, agent on 127.0.0.1:%d\n", first.path, accel, appHost, agentHost)

	if err := waitServing(ctx, exited, watch.failed, credential, agentHost, appHost); err != nil {
		return 0, fmt.Errorf("%w\nconsole (last lines):\n%s", err, lastLines(console, 60))
	}
	took := time.Since(start)
	if err := rootGrown(console, first.size, first.size+grow); err != nil {
		return 0, fmt.Errorf("serving after %.1f s, but %w", took.Seconds(), err)
	}
	return took, nil
}

// stopQEMU stops QEMU, by SIGTERM and then SIGKILL. A QEMU stuck in the kernel (an abort under a
// nested KVM can leave it so) may outlive even SIGKILL: it is then named and left, rather than
// waited for without end.
func stopQEMU(qemu *os.Process, exited <-chan error) {
	_ = qemu.Signal(syscall.SIGTERM)
	select {
	case <-exited:
		return
	case <-time.After(10 * time.Second):
	}
	_ = qemu.Kill()
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		fmt.Fprintf(os.Stderr, "test-disk: QEMU (pid %d) has not exited 30 s after SIGKILL: left as it is\n", qemu.Pid)
	}
}

// buildDisks builds the node image and its disk, twice when twice is set, and wants the same
// digest from both builds.
func buildDisks(ctx context.Context, herd, nodeImage, work string, twice bool) (built, error) {
	data := filepath.Join(work, "data")
	if err := herdCmd(ctx, herd, "image", "build", "--data-dir", data, "-f", nodeImage, "-q"); err != nil {
		return built{}, err
	}
	name := "hello"
	first, err := buildDisk(ctx, herd, data, name, filepath.Join(work, "disk-1.raw"))
	if err != nil || !twice {
		return first, err
	}
	second, err := buildDisk(ctx, herd, data, name, filepath.Join(work, "disk-2.raw"))
	if err != nil {
		return built{}, err
	}
	if second.digest != first.digest {
		return built{}, fmt.Errorf("two builds of the same node image gave different disks: %s and %s (kept with -keep)", first.digest, second.digest)
	}
	fmt.Fprintf(os.Stderr, "both builds gave %s\n", first.digest)
	return first, os.Remove(second.path)
}

// grow is how much bigger than the image the booted machine's disk is.
const grow = 2 << 30

// growCopy copies the disk src to dst, sparse, and makes dst more bytes bigger.
func growCopy(ctx context.Context, src, dst string, more int64) error {
	if out, err := exec.CommandContext(ctx, "cp", "--sparse=always", src, dst).CombinedOutput(); err != nil {
		return fmt.Errorf("copying the disk: %w: %s", err, out)
	}
	fi, err := os.Stat(dst)
	if err != nil {
		return err
	}
	return os.Truncate(dst, fi.Size()+more)
}

// rootSize is the agent's line with the root file system's size, on the console.
var rootSize = regexp.MustCompile(`msg="root file system".* size_mb=(\d+)`)

// rootGrown checks, on the console, that the root file system grew at boot beyond the image's
// whole size (without growing, it is smaller than the image: the ESP and ext4's own metadata
// take some of it), and prints its size.
func rootGrown(console string, imageSize, diskSize int64) error {
	data, err := os.ReadFile(console)
	if err != nil {
		return err
	}
	m := rootSize.FindSubmatch(data)
	if m == nil {
		return fmt.Errorf("the agent did not log the root file system's size on the console")
	}
	var mb int64
	fmt.Sscan(string(m[1]), &mb)
	if mb <= imageSize>>20 {
		return fmt.Errorf("the root file system has %d MiB on a disk of %d MiB: it did not grow beyond the image's %d MiB", mb, diskSize>>20, imageSize>>20)
	}
	fmt.Fprintf(os.Stderr, "the root file system grew to %d MiB on a disk of %d MiB (the image: %d MiB)\n", mb, diskSize>>20, imageSize>>20)
	return nil
}

// describe measures an existing disk.
func describe(path string) (built, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return built{}, err
	}
	return built{path: path, size: fi.Size(), allocated: fi.Sys().(*syscall.Stat_t).Blocks * 512}, nil
}

// built is what herd image disk printed.
type built struct {
	path, digest    string
	size, allocated int64
}

var diskLine = regexp.MustCompile(`^disk (\S+): (sha256:[0-9a-f]{64}) size_mb=(\d+) allocated_mb=(\d+)$`)

func buildDisk(ctx context.Context, herd, data, name, out string) (built, error) {
	start := time.Now()
	cmd := exec.CommandContext(ctx, herd, "image", "disk", "--data-dir", data, name, "-o", out)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.Output()
	if err != nil {
		return built{}, fmt.Errorf("herd image disk: %w", err)
	}
	m := diskLine.FindStringSubmatch(strings.TrimSpace(string(stdout)))
	if m == nil {
		return built{}, fmt.Errorf("herd image disk printed %q", stdout)
	}
	b, err := describe(out)
	b.digest = m[2]
	fmt.Fprintf(os.Stderr, "built %s in %.0f s: %s\n", out, time.Since(start).Seconds(), b.digest)
	return b, err
}

// waitServing waits until the agent reports Ready and the app answers, both through QEMU's
// forwarded ports.
func waitServing(ctx context.Context, exited <-chan error, kvmFailed <-chan struct{}, credential string, agentHost, appHost int) error {
	c := &http.Client{Timeout: 5 * time.Second}
	get := func(port int, path string) (int, string) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d%s", port, path), nil)
		if err != nil {
			return 0, err.Error()
		}
		if port == agentHost {
			req.Header.Set("Authorization", "Bearer "+credential)
		}
		resp, err := c.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return resp.StatusCode, strings.TrimSpace(string(body))
	}
	last := ""
	for {
		code, body := get(agentHost, "/readyz")
		if code == http.StatusOK {
			if code, body = get(appHost, "/"); code == http.StatusOK {
				fmt.Fprintf(os.Stderr, "the agent reports Ready and the app answers: %s\n", body)
				return nil
			}
			body = "app: " + body
		}
		if body != last {
			fmt.Fprintf(os.Stderr, "%s waiting: %d %s\n", time.Now().UTC().Format(time.TimeOnly), code, body)
			last = body
		}
		select {
		case err := <-exited:
			return fmt.Errorf("qemu exited before the instance served: %v", err)
		case <-kvmFailed:
			return errKVM
		case <-ctx.Done():
			return fmt.Errorf("not serving in time: last %d %s: %w", code, body, ctx.Err())
		case <-time.After(2 * time.Second):
		}
	}
}

func herdCmd(ctx context.Context, herd string, args ...string) error {
	cmd := exec.CommandContext(ctx, herd, args...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("herd %s: %w", strings.Join(args, " "), err)
	}
	return nil
}

// freePort is a loopback TCP port that was free a moment ago.
func freePort() int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// lastLines is the end of a file, for an error.
func lastLines(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}
