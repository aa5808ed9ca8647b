package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/client"
	"herd.dev/herd/internal/freeport"
	"herd.dev/herd/internal/provider"
	"herd.dev/herd/internal/provider/local"
	"herd.dev/herd/internal/provider/local/localtest"
	"herd.dev/herd/internal/store/etcd/etcdcluster"
)

const (
	haFleet     = "ha"
	ledgerFleet = "ledger"
	haReplicas  = 3
)

// haReplica is one herd up of the HA scenario, as its own process.
type haReplica struct {
	lbHost string // its load balancer's address, 127.0.0.<n>
	api    string // its API's URL
	cmd    *exec.Cmd
	done   chan struct{}
	log    string
}

// haScenario is three herd up replicas on a 3-member etcd, sharing one data directory (the local
// provider's instances) and one client config.
type haScenario struct {
	*env
	etcd     *etcdcluster.Cluster
	replicas []*haReplica
	token    string
}

// startHA starts the etcd cluster and the replicas and builds the hello images. e.up is set to a
// replica that stays (the test's and the cleanup's herd up); the others are stopped before the
// cleanup deletes the fleets through it.
func startHA(t *testing.T) *haScenario {
	e := newEnv(t, withHello, buildingVariant("hello-v2", "REVISION", "v2"))
	ec, err := etcdcluster.Start(context.Background(), etcdcluster.Config{Dir: filepath.Join(e.dir, "etcd"),
		Args: etcdcluster.FastElection, DieWithParent: true})
	if err != nil {
		t.Fatal(err)
	}
	localtest.CleanupOnInterrupt(t, func() { _ = ec.Stop() }) // last: the cleanup below deletes the fleets through etcd
	before := localtest.Take(t)
	localtest.CleanupOnInterrupt(t, func() { e.cleanup(before) })
	s := &haScenario{env: e, etcd: ec}
	localtest.CleanupOnInterrupt(t, s.stopOthers)
	for i := range haReplicas {
		s.startReplica(i)
	}
	cfg, err := client.LoadConfig(filepath.Join(e.dir, "config"))
	if err != nil {
		t.Fatal(err)
	}
	s.token = cfg.Token
	e.lbPort = freeport.TCP(t)
	return s
}

// startReplica starts replica i and waits until it serves and has added itself to the client config.
func (s *haScenario) startReplica(i int) {
	t := s.t
	r := &haReplica{lbHost: fmt.Sprintf("127.0.0.%d", i+1), done: make(chan struct{}),
		log: filepath.Join(s.dir, fmt.Sprintf("up-%d.log", i))}
	logf, err := os.Create(r.log)
	if err != nil {
		t.Fatal(err)
	}
	r.cmd = exec.Command(s.bin, "up", "--provider", "local", "--data-dir", s.data, "--listen", "127.0.0.1:0",
		"--lb-address", r.lbHost, "--store", "etcd", "--etcd-endpoints", strings.Join(s.etcd.Endpoints(), ","),
		"--leader-lease-ttl", "1", "--etcd-request-timeout", "2s")
	r.cmd.Env = append(os.Environ(), "HERD_CONFIG="+filepath.Join(s.dir, "config"))
	r.cmd.Stdout, r.cmd.Stderr = logf, logf
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = r.cmd.Wait(); logf.Close(); close(r.done) }()
	s.replicas = append(s.replicas, r)
	if s.up == nil {
		s.use(r)
	}
	s.waitFor(30*time.Second, 100*time.Millisecond, func() string {
		cfg, err := client.LoadConfig(filepath.Join(s.dir, "config"))
		if err != nil {
			return err.Error()
		}
		if eps := cfg.Endpoints(); len(eps) != i+1 {
			return fmt.Sprintf("the client config lists %d servers, want %d", len(eps), i+1)
		} else {
			r.api = eps[i]
		}
		return ""
	})
}

// use makes r the env's herd up: the one waitFor watches and the cleanup stops last.
func (s *haScenario) use(r *haReplica) {
	s.up, s.upDone, s.upLog = r.cmd, r.done, r.log
}

// stopOthers stops every replica but the env's own (SIGINT: each resigns and stops), so that
// the cleanup's deletions are carried out by the one left.
func (s *haScenario) stopOthers() {
	for _, r := range s.replicas {
		if r.cmd == s.up {
			continue
		}
		select {
		case <-r.done:
			continue
		default:
		}
		_ = r.cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-r.done:
		case <-time.After(time.Minute):
			s.t.Errorf("replica %s did not stop within a minute of SIGINT; killing it", r.api)
			_ = r.cmd.Process.Kill()
			<-r.done
		}
		if s.t.Failed() {
			log, _ := os.ReadFile(r.log)
			s.t.Logf("replica %s log (tail):\n%s", r.api, tail(string(log), 40))
		}
	}
}

// status is replica r's /v1/status, nil when it does not answer.
func (s *haScenario) status(r *haReplica) map[string]string {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	st, err := client.New(&client.Config{Server: r.api, Token: s.token}).Status(ctx)
	if err != nil {
		return nil
	}
	return st
}

// leader waits until exactly one live replica leads with its controller synced, and returns it.
func (s *haScenario) leader(timeout time.Duration) *haReplica {
	var lead *haReplica
	s.waitFor(timeout, 20*time.Millisecond, func() string {
		lead = nil
		var roles []string
		for _, r := range s.replicas {
			st := s.status(r)
			roles = append(roles, fmt.Sprintf("%s=%s/%s", r.lbHost, st["role"], st["controller"]))
			if st["role"] == "leader" && st["controller"] == "synced" {
				if lead != nil {
					return "two leaders: " + strings.Join(roles, " ")
				}
				lead = r
			}
		}
		if lead == nil {
			return "no synced leader: " + strings.Join(roles, " ")
		}
		return ""
	})
	return lead
}

// writer runs `herd scale` on the ledger fleet in a loop with desired 1, 2, 3, ... and records
// which values the control plane acknowledged.
type writer struct {
	mu    sync.Mutex
	acked []int32
	tried int
	stop  chan struct{}
	done  chan struct{}
}

func (e *env) startWriter() *writer {
	w := &writer{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for v := int32(1); ; v++ {
			select {
			case <-w.stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			_, err := e.herd("scale", "fleet", ledgerFleet, "--replicas", strconv.Itoa(int(v)))
			w.mu.Lock()
			w.tried++
			if err == nil {
				w.acked = append(w.acked, v)
			}
			w.mu.Unlock()
		}
	}()
	return w
}

// ackedSoFar returns the values acknowledged until now.
func (w *writer) ackedSoFar() []int32 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]int32(nil), w.acked...)
}

func (w *writer) finish() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
}

// ledgerDesired reads the ledger fleet's desired count from the store, -1 if it cannot.
func (e *env) ledgerDesired() int32 {
	f := e.fleet(ledgerFleet)
	if f == nil || f.Spec.Replicas.Desired == nil {
		return -1
	}
	return *f.Spec.Replicas.Desired
}

// lostWrites counts the acknowledged values that stored does not reflect: values only grow, so
// the store holds the last acknowledged one or a later one.
func lostWrites(acked []int32, stored int32) int {
	n := 0
	for _, v := range acked {
		if v > stored {
			n++
		}
	}
	return n
}

// orphansAndDuplicates compares the local provider's instances with the records: orphans run
// with no record; duplicates are instances of fleet ha beyond its desired count.
func (s *haScenario) orphansAndDuplicates(desired int) (orphans, duplicates int, msg string) {
	p, err := local.New(local.Options{DataDir: s.data, HerdBinary: s.bin})
	if err != nil {
		return 0, 0, err.Error()
	}
	running, err := p.List(context.Background(), provider.ListOptions{})
	if err != nil {
		return 0, 0, err.Error()
	}
	recs := s.instances()
	if recs == nil {
		return 0, 0, "herd get instances failed"
	}
	recorded := map[string]bool{}
	for _, in := range recs {
		recorded[in.Metadata.Name] = true
	}
	fleetRunning := 0
	for _, in := range running {
		if !recorded[in.Name] {
			orphans++
		}
		if in.Labels[v1alpha1.LabelFleet] == haFleet {
			fleetRunning++
		}
	}
	duplicates = max(0, fleetRunning-desired)
	if orphans > 0 || fleetRunning != desired {
		msg = fmt.Sprintf("%d provider instances (%d of fleet %s, want %d), %d records, %d orphans", len(running), fleetRunning, haFleet, desired, len(recs), orphans)
	}
	return orphans, duplicates, msg
}

// TestIntegrationHATakeover runs three herd up replicas on a 3-member etcd with a fleet of three
// real instances of hello under load through the load balancers of two of them, starts a rolling
// update, and SIGKILLs the leader while the first new instance is being created, with a client
// running `herd scale` in a loop. Another replica must take over and finish the rollout, with no
// request failed through the surviving load balancers, no acknowledged write lost, and no
// instance orphaned or doubled. Then etcd loses one member (the API goes on), two (the API
// answers 503 "etcd has no quorum", the load balancers serve on) and gets them back (a leader
// again, writes again). make bench-ha prints its figures line.
func TestIntegrationHATakeover(t *testing.T) {
	s := startHA(t)
	lead := s.leader(30 * time.Second)
	for _, r := range s.replicas {
		if r != lead {
			s.use(r) // the env's herd up must outlive the kill
			break
		}
	}
	spec := fmt.Sprintf(`apiVersion: herd.dev/v1alpha1
kind: Fleet
metadata: {name: %s}
spec:
  image: %%s
  replicas: {min: 1, max: 10, desired: 3}
  listeners: [{name: http, port: %d, instancePort: %d, protocol: http}]
  healthCheck: {path: /healthz, port: %d, interval: 250ms, timeout: 200ms, unhealthyThreshold: 2, healthyThreshold: 1, gracePeriod: %s}
  rollout: {strategy: Rolling, maxSurge: 1, maxUnavailable: 0}
  regions: [{name: local, provider: local}]
`, haFleet, s.lbPort, helloPort, helloPort, rolloutGrace)
	s.applyFleet(fmt.Appendf(nil, spec, "hello"))
	original, oldRev := map[string]bool{}, ""
	for _, in := range s.waitServing(3) {
		original[in.Metadata.Name], oldRev = true, in.Spec.Revision
	}

	// Load through every load balancer but the leader's, which dies with it.
	var loads []*load
	for _, r := range s.replicas {
		if r == lead {
			continue
		}
		l := startLoad(fmt.Sprintf("http://%s:%d/", r.lbHost, s.lbPort), paceClients, pace, 10*time.Minute)
		defer l.finish()
		loads = append(loads, l)
		s.waitFor(30*time.Second, 50*time.Millisecond, func() string { return l.unanswered(original) })
	}
	// The ledger fleet only holds the writer's values: its image is a bundle with nothing in it,
	// which apply can pin but no instance can boot, so each of its instances fails at once
	// without booting anything.
	const emptyBundle = "sha256:" + "0000000000000000000000000000000000000000000000000000000000000001"
	if err := os.MkdirAll(filepath.Join(s.data, "images", "bundles", strings.TrimPrefix(emptyBundle, "sha256:")), 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := s.applyFile("ledger", fmt.Appendf(nil, `apiVersion: herd.dev/v1alpha1
kind: Fleet
metadata: {name: %s}
spec:
  image: %s
  replicas: {min: 0, max: 1000, desired: 0}
  regions: [{name: local, provider: local}]
`, ledgerFleet, emptyBundle)); err != nil {
		t.Fatalf("apply the ledger fleet: %v\n%s", err, out)
	}
	w := s.startWriter()
	defer w.finish()
	s.waitFor(30*time.Second, 50*time.Millisecond, func() string {
		if n := len(w.ackedSoFar()); n < 5 {
			return fmt.Sprintf("%d scale writes acknowledged", n)
		}
		return ""
	})

	// The rollout starts; the leader dies as it creates the first instance of the new revision.
	s.applyFleet(fmt.Appendf(nil, spec, "hello-v2"))
	var newRev string
	s.waitFor(time.Minute, 20*time.Millisecond, func() string {
		for _, in := range s.instances() {
			if in.Spec.Fleet == haFleet && in.Spec.Revision != oldRev {
				newRev = in.Spec.Revision
				return ""
			}
		}
		return "no instance of the new revision recorded yet"
	})
	ackedBefore := w.ackedSoFar()
	killedAt := time.Now()
	_ = lead.cmd.Process.Signal(syscall.SIGKILL)
	<-lead.done
	next := s.leader(30 * time.Second)
	takeover := time.Since(killedAt)
	t.Logf("SIGKILL of the leader %s: %s leads with its controller synced after %.2f s", lead.api, next.api, takeover.Seconds())
	storedAfter := s.ledgerDesired()
	// A few more writes through the new leader's time, then the writer stops: each value is an
	// instance record of the ledger fleet.
	s.waitFor(time.Minute, 50*time.Millisecond, func() string {
		if n := len(w.ackedSoFar()) - len(ackedBefore); n < 10 {
			return fmt.Sprintf("%d scale writes acknowledged since the kill", n)
		}
		return ""
	})
	w.finish()
	acked := w.ackedSoFar()
	final := s.ledgerDesired()
	lost := map[int32]bool{}
	for _, v := range ackedBefore {
		if v > storedAfter {
			lost[v] = true
		}
	}
	for _, v := range acked {
		if v > final {
			lost[v] = true
		}
	}
	t.Logf("herd scale: %d writes, %d acknowledged (%d before the kill, the last of them %d); stored after the takeover %d, at the end %d (last acknowledged %d)",
		w.tried, len(acked), len(ackedBefore), last(ackedBefore), storedAfter, final, last(acked))

	// The new leader finishes the rollout.
	s.waitFor(5*time.Minute, 250*time.Millisecond, func() string {
		f := s.fleet(haFleet)
		if f == nil || f.Status.CurrentRevision != newRev {
			return fmt.Sprintf("fleet %s not on revision %s yet", haFleet, newRev)
		}
		n, total := 0, 0
		for _, in := range s.instances() {
			if in.Spec.Fleet != haFleet {
				continue
			}
			total++
			if in.Spec.Revision == newRev && in.Status.Phase == v1alpha1.PhaseReady {
				n++
			}
		}
		if n != 3 || total != 3 {
			return fmt.Sprintf("%d instances, %d Ready of %s; want just 3 of it", total, n, newRev)
		}
		return ""
	})
	revOf := map[string]string{}
	for _, in := range s.instances() {
		revOf[in.Metadata.Name] = in.Spec.Revision
	}
	for _, l := range loads {
		s.waitAnswers(l, 100, func(instance string) bool { return revOf[instance] == newRev })
	}

	var orphans, duplicates int
	s.waitFor(2*time.Minute, 500*time.Millisecond, func() string {
		var msg string
		orphans, duplicates, msg = s.orphansAndDuplicates(3)
		return msg
	})

	s.etcdMembersDown(loads)

	failed, total := 0, 0
	for _, l := range loads {
		results := l.finish()
		total += len(results)
		for _, r := range results {
			if r.err != nil {
				failed++
				if failed <= 10 {
					t.Logf("failed request at kill%+dms: %v", r.at.Sub(killedAt).Milliseconds(), r.err)
				}
			}
		}
	}
	t.Logf("%d requests through the load balancers of the replicas that lived, %d failed", total, failed)
	t.Logf("ha: takeover_s=%.2f failed_requests=%d lost_acked_writes=%d orphans=%d duplicates=%d",
		takeover.Seconds(), failed, len(lost), orphans, duplicates)
	if failed != 0 || len(lost) != 0 || orphans != 0 || duplicates != 0 {
		t.Errorf("want no failed request, lost write, orphan or duplicate")
	}
}

func last(vs []int32) int32 {
	if len(vs) == 0 {
		return 0
	}
	return vs[len(vs)-1]
}

// etcdMembersDown takes etcd members away while the loads run: with one down the API goes on
// (at most one request retried); with two down it answers 503 "etcd has no quorum" and the load
// balancers serve on; once they are back a replica leads again and a write goes through.
func (s *haScenario) etcdMembersDown(loads []*load) {
	t := s.t
	m0, m1 := s.etcd.Members[0], s.etcd.Members[1]
	if err := s.etcd.Kill(m0); err != nil {
		t.Fatal(err)
	}
	failed := 0
	for i := range 10 {
		if out, err := s.herd("scale", "fleet", ledgerFleet, "--replicas", strconv.Itoa(i%2)); err != nil {
			failed++
			t.Logf("herd scale with one etcd member down: %v %s", err, out)
		}
	}
	if failed > 1 {
		t.Errorf("%d of 10 writes failed with one etcd member down, want at most 1", failed)
	}
	if err := s.etcd.Kill(m1); err != nil {
		t.Fatal(err)
	}
	out, err := s.herd("get", "fleets")
	if err == nil || !strings.Contains(out, "etcd has no quorum") {
		t.Errorf("herd get fleets without quorum: %v\n%s\nwant an error saying etcd has no quorum", err, out)
	}
	t.Logf("without quorum: %s", strings.TrimSpace(out))
	// A few seconds without quorum, past the leader's lease: the load balancers serve on.
	for _, l := range loads {
		s.waitAnswers(l, 1500, func(string) bool { return true })
	}
	for _, m := range []*etcdcluster.Member{m0, m1} {
		if err := s.etcd.Restart(context.Background(), m); err != nil {
			t.Fatal(err)
		}
	}
	back := time.Now()
	s.leader(time.Minute)
	t.Logf("etcd quorum back: a synced leader after %.2f s", time.Since(back).Seconds())
	if out, err := s.herd("scale", "fleet", ledgerFleet, "--replicas", "0"); err != nil {
		t.Errorf("herd scale once quorum is back: %v %s", err, out)
	}
}
