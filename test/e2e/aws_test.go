package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/controller"
	"herd.dev/herd/internal/freeport"
	"herd.dev/herd/internal/provider/local/localtest"
)

const (
	awsFleet = "hello"
	// awsStepLimit bounds each step's wait. It is a failure bound, not a timing assertion: real
	// instances booting on a 2-core machine under load take minutes, and a tight bound fails on
	// the machine's load rather than on herd.
	awsStepLimit = 8 * time.Minute
	// awsGrace is the instances' boot grace period: long, so that a slow boot is not healed
	// into a loop of replacements while the test counts launches.
	awsGrace = 3 * time.Minute
	// awsClients are the HTTP clients kept running through herd's load balancer while an instance
	// is replaced.
	awsClients = 4
)

// cloudInstance is one EC2 instance of the fleet as EC2 reports it.
type cloudInstance struct {
	ID, Name, Type, State string // Name: the herd instance it runs (its herd.dev/instance tag)
}

// cloud is EC2 as the test sees it apart from herd: the twin, or a real account.
type cloud interface {
	// prepare makes the AMI of the hello image, built, available to the fleet.
	prepare()
	// instances returns the fleet's EC2 instances that are not shutting down or terminated.
	instances() ([]cloudInstance, error)
	// targets returns the target group's members and their health, by instance ID.
	targets() (map[string]string, error)
	// terminate terminates an instance from outside herd.
	terminate(id string) error
	// regionOptions are the options of the fleet's region on provider aws.
	regionOptions() map[string]string
	// upEnv is what herd up's environment needs to reach EC2.
	upEnv() []string
	// stopped stops what the cloud ran for the test once herd up has stopped, and returns what
	// of it is left to check on the host.
	stopped() localtest.Owned
}

// awsScenario is a herd up whose fleet's region runs on the aws provider.
type awsScenario struct {
	*env
	cloud  cloud
	twin   *twinCloud // nil against a real account
	delete sync.Once
}

// TestIntegrationAWS runs the hello fleet on provider: aws, on real instances: behind the AWS
// twin (internal/provider/aws/awstwin, its instances real local instances through twinlocal),
// or against a real account with HERD_AWS_LIVE=1 (make test-aws-live, docs/aws.md). The steps
// share the fleet's instances: the fleet of 3 launches on the second instance type when the
// first has no capacity and serves through herd's load balancer; an instance terminated from
// outside and one given a spot interruption notice are replaced with no failed request; herd up
// killed and restarted adopts every instance and launches nothing; a scale-up to 10 through a
// throttling storm and DescribeInstances lag makes no duplicate and leaks nothing; deleting the
// fleet leaves no instance and no target group member.
func TestIntegrationAWS(t *testing.T) {
	s := startAWS(t)
	s.serves()
	s.replacedAfter("terminated from outside", s.cloud.terminate)
	if s.twin != nil {
		s.replacedAfter("given a spot interruption notice", s.twin.interruptSpot)
	} else {
		t.Log("spot interruption notice: skipped against a real account (only the twin can give one on request)")
	}
	s.restartAdopts()
	s.scaleUpUnderFaults()
	s.deleteFleet()
}

// startAWS starts herd up with the hello image built, and the cloud its fleet's region runs on.
// The fleet's delete, checked, is the test's first cleanup; herd up's stop and the check of the
// host for leftovers follow it.
func startAWS(t *testing.T) *awsScenario {
	e := newEnv(t, withHello)
	s := &awsScenario{env: e}
	// The cloud starts before the check of the host is registered, so that it stops after it.
	if os.Getenv("HERD_AWS_LIVE") != "" {
		s.cloud = newLiveCloud(e)
	} else {
		s.twin = startTwin(e)
		s.cloud = s.twin
	}
	before := localtest.Take(t)
	localtest.CleanupOnInterrupt(t, func() { e.cleanup(before) })
	e.stopped = s.cloud.stopped
	e.upEnv = s.cloud.upEnv()
	s.cloud.prepare()
	e.startUp()
	t.Cleanup(s.deleteFleet)
	e.lbPort = freeport.TCP(t)
	return s
}

// fleetYAML is the hello fleet with desired instances in one region on provider aws, in JSON,
// which herd apply reads as the YAML it is.
func (s *awsScenario) fleetYAML(desired int) []byte {
	health := map[string]any{"path": "/healthz", "port": helloPort, "interval": "500ms", "timeout": "400ms",
		"unhealthyThreshold": 2, "healthyThreshold": 1, "gracePeriod": awsGrace.String()}
	b, err := json.Marshal(map[string]any{
		"apiVersion": v1alpha1.GroupVersion, "kind": v1alpha1.KindFleet,
		"metadata": map[string]any{"name": awsFleet},
		"spec": map[string]any{
			"image": "hello", "replicas": map[string]int{"min": 1, "max": 10, "desired": desired},
			"listeners":   []map[string]any{{"name": "http", "port": s.lbPort, "instancePort": helloPort, "protocol": "http"}},
			"healthCheck": health,
			"regions":     []map[string]any{{"name": "eu", "provider": "aws", "options": s.cloud.regionOptions()}},
		},
	})
	if err != nil {
		s.t.Fatal(err)
	}
	return b
}

// poll calls cond every second until it returns "", and returns an error with cond's last word
// after limit.
func poll(limit time.Duration, cond func() string) error {
	last := ""
	err := wait.PollUntilContextTimeout(context.Background(), time.Second, limit, true, func(context.Context) (bool, error) {
		last = cond()
		return last == "", nil
	})
	if err != nil {
		return fmt.Errorf("not within %s: %s", limit, last)
	}
	return nil
}

// await is poll, failing the test with herd up's last log lines.
func (s *awsScenario) await(what string, limit time.Duration, cond func() string) {
	s.t.Helper()
	if err := poll(limit, cond); err != nil {
		log, _ := os.ReadFile(s.upLog)
		s.t.Fatalf("%s: %v\nherd up log (tail):\n%s", what, err, tail(string(log), 30))
	}
}

// serving returns the fleet's instances that are Ready and healthy in herd's load balancer,
// by name, and a description of every instance's state.
func (s *awsScenario) serving() (map[string]bool, string) {
	out := map[string]bool{}
	var states []string
	for _, in := range s.instances() {
		states = append(states, fmt.Sprintf("%s %s/%s", in.Metadata.Name, in.Status.Phase, in.Status.LBHealth))
		if in.Status.Phase == v1alpha1.PhaseReady && in.Status.LBHealth == controller.HealthHealthy {
			out[in.Metadata.Name] = true
		}
	}
	return out, strings.Join(states, ", ")
}

// awaitServing waits until the fleet has exactly n instances, all serving, and EC2 runs exactly
// them; it returns their names.
func (s *awsScenario) awaitServing(what string, n int) map[string]bool {
	s.t.Helper()
	var names map[string]bool
	s.await(what, awsStepLimit, func() string {
		var msg string
		names, msg = s.servingExactly(n)
		return msg
	})
	return names
}

// servingExactly returns the names of the fleet's instances when there are n, all serving, and
// EC2 runs exactly them; else what differs.
func (s *awsScenario) servingExactly(n int) (map[string]bool, string) {
	names, states := s.serving()
	if got := len(s.instances()); len(names) != n || got != n {
		return nil, fmt.Sprintf("want %d instances, all Ready and healthy; have %s", n, states)
	}
	ec2, err := s.cloud.instances()
	if err != nil {
		return nil, err.Error()
	}
	if msg := sameInstances(names, ec2); msg != "" {
		return nil, msg
	}
	return names, ""
}

// sameInstances says how the EC2 instances differ from herd's, one each: "" when they match.
func sameInstances(herd map[string]bool, ec2 []cloudInstance) string {
	seen := map[string]int{}
	for _, in := range ec2 {
		seen[in.Name]++
	}
	var diff []string
	for name, n := range seen {
		switch {
		case !herd[name]:
			diff = append(diff, fmt.Sprintf("%s runs on EC2 and herd has no such instance", name))
		case n > 1:
			diff = append(diff, fmt.Sprintf("%s runs %d times on EC2", name, n))
		}
	}
	for name := range herd {
		if seen[name] == 0 {
			diff = append(diff, name+" is herd's and does not run on EC2")
		}
	}
	sort.Strings(diff)
	return strings.Join(diff, "; ")
}

// url is the fleet's listener on herd's load balancer.
func (s *awsScenario) url() string { return fmt.Sprintf("http://127.0.0.1:%d/", s.lbPort) }

// serves applies the fleet of 3 and waits until every instance answers through herd's load
// balancer. Against the twin, the first instance type has no capacity, and every instance must
// have launched on the second.
func (s *awsScenario) serves() {
	t := s.t
	if s.twin != nil {
		s.twin.noCapacityOnFirstType()
	} else {
		t.Log("InsufficientInstanceCapacity on the first instance type: skipped against a real account (only the twin runs out of capacity on request)")
	}
	s.applyFleet(s.fleetYAML(replicas))
	names := s.awaitServing("the fleet of 3 serving", replicas)
	l := startLoad(s.url(), awsClients, clientPace, awsStepLimit)
	defer l.finish()
	s.await("every instance answering through herd's load balancer", awsStepLimit, func() string { return l.unanswered(names) })
	if n := failed(t, "the fleet serving", l.finish()); n != 0 {
		t.Errorf("%d requests failed through herd's load balancer while the fleet served, want 0", n)
	}
	if s.twin != nil {
		s.twin.checkLaunchedOnSecondType()
	}
	t.Logf("the fleet of %d serves through herd's load balancer: %v", replicas, slices.Sorted(maps.Keys(names)))
}

// replacedAfter does something to one serving instance (by its EC2 ID) under steady load
// through herd's load balancer, and waits until a replacement serves in its place, the instance
// gone from herd and from EC2; no request may fail.
func (s *awsScenario) replacedAfter(what string, do func(id string) error) {
	t := s.t
	before := s.awaitServing("the fleet serving before an instance is "+what, replicas)
	ec2, err := s.cloud.instances()
	if err != nil {
		t.Fatal(err)
	}
	victim := ec2[0]
	l := startLoad(s.url(), awsClients, clientPace, 2*awsStepLimit)
	defer l.finish()
	s.await("every instance answering before one is "+what, awsStepLimit, func() string { return l.unanswered(before) })
	at := time.Now()
	if err := do(victim.ID); err != nil {
		t.Fatal(err)
	}
	var after map[string]bool
	s.await(fmt.Sprintf("%s (%s) %s replaced", victim.Name, victim.ID, what), awsStepLimit, func() string {
		var msg string
		if after, msg = s.servingExactly(replicas); msg != "" {
			return msg
		}
		if after[victim.Name] {
			return victim.Name + " still serves"
		}
		return ""
	})
	newcomers := map[string]bool{}
	for name := range after {
		if !before[name] {
			newcomers[name] = true
		}
	}
	s.await("the replacement answering through herd's load balancer", awsStepLimit, func() string { return l.unanswered(newcomers) })
	n := failed(t, "an instance "+what, l.finish())
	t.Logf("%s (%s) %s: replaced by %v after %s, %d requests failed", victim.Name, victim.ID, what,
		slices.Sorted(maps.Keys(newcomers)), time.Since(at).Round(time.Second), n)
	if n != 0 {
		t.Errorf("%d requests failed while an instance %s was replaced, want 0", n, what)
	}
}

// failed counts the failed requests of a load that ran while what happened, logging the first
// few.
func failed(t *testing.T, what string, rs []result) int {
	n, total := failures(t, what, rs, time.Time{}, time.Now())
	t.Logf("%s: %d requests through herd's load balancer, %d failed", what, total, n)
	return n
}

// restartAdopts kills herd up, starts it again on its data directory and waits until it serves
// the same instances: it found them by their tags, and launched nothing.
func (s *awsScenario) restartAdopts() {
	t := s.t
	before := s.awaitServing("the fleet serving before herd up is killed", replicas)
	launches := -1
	if s.twin != nil {
		launches = s.twin.runInstances()
	}
	if err := s.up.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-s.upDone
	listed := 0
	if s.twin != nil {
		listed = s.twin.describeInstances()
	}
	s.startUp()
	after := s.awaitServing("the fleet serving after herd up restarted", replicas)
	if !maps.Equal(before, after) {
		t.Errorf("herd up restarted serves %v, want the instances it ran before: %v", after, before)
	}
	// The instances' records and states are herd up's stored ones until it lists EC2: the count
	// of launches means something once (against the twin) the restarted herd up has listed EC2,
	// which it does as its controller starts, and its load balancer serves every instance.
	l := startLoad(s.url(), awsClients, clientPace, awsStepLimit)
	defer l.finish()
	s.await("herd up restarted serving every instance through its load balancer and listing EC2", awsStepLimit, func() string {
		if msg := l.unanswered(after); msg != "" {
			return msg
		}
		if s.twin != nil && s.twin.describeInstances() <= listed {
			return "herd up restarted has not listed EC2 yet"
		}
		return ""
	})
	if n := failed(t, "after herd up restarted", l.finish()); n != 0 {
		t.Errorf("%d requests failed through the restarted herd up's load balancer, want 0", n)
	}
	if s.twin == nil {
		t.Log("RunInstances calls after the restart: not counted against a real account; the instances are the same")
		return
	}
	if got := s.twin.runInstances(); got != launches {
		t.Errorf("herd up restarted called RunInstances %d times, want 0: it must adopt its instances by tag", got-launches)
	}
	t.Logf("herd up killed and restarted adopted %v and launched nothing", slices.Sorted(maps.Keys(after)))
}

// scaleUpUnderFaults scales the fleet to 10 and waits until herd has 10 instances and EC2 runs
// exactly them, once each; against the twin, through a throttling storm and DescribeInstances
// lagging behind the launches. Then it scales back to 3.
func (s *awsScenario) scaleUpUnderFaults() {
	t := s.t
	if s.twin != nil {
		s.twin.storm()
	} else {
		t.Log("throttling storm and DescribeInstances lag: skipped against a real account (only the twin injects them); the scale-up still counts duplicates and leaks")
	}
	const scaled = 10
	s.applyFleet(s.fleetYAML(scaled))
	var herd map[string]bool
	var ec2 []cloudInstance
	s.await("the fleet scaled up to 10, each instance once on EC2", awsStepLimit, func() string {
		herd = map[string]bool{}
		for _, in := range s.instances() {
			herd[in.Metadata.Name] = true
		}
		if len(herd) != scaled {
			return fmt.Sprintf("herd has %d instances, want %d", len(herd), scaled)
		}
		var err error
		if ec2, err = s.cloud.instances(); err != nil {
			return err.Error()
		}
		return sameInstances(herd, ec2)
	})
	leaked, duplicates := 0, 0
	for _, in := range ec2 {
		if !herd[in.Name] {
			leaked++
		}
	}
	if s.twin != nil {
		duplicates = s.twin.checkStorm()
	}
	t.Logf("scale-up to %d: duplicates=%d leaked=%d", scaled, duplicates, leaked)
	s.applyFleet(s.fleetYAML(replicas))
	s.awaitServing("the fleet scaled back down to 3", replicas)
}

// deleteFleet deletes the fleet and waits until EC2 runs none of its instances and the target
// group has no member. It runs once: as the test's last step, or as its cleanup when the test
// stopped before it.
func (s *awsScenario) deleteFleet() {
	s.delete.Do(func() {
		t := s.t
		select {
		case <-s.upDone:
			t.Errorf("herd up is not running: the fleet could not be deleted through it")
			return
		default:
		}
		if s.twin != nil {
			s.twin.calm() // a step that failed may have left its faults on
		}
		if out, err := s.herd("delete", "fleet", awsFleet); err != nil {
			t.Errorf("herd delete fleet %s: %v\n%s", awsFleet, err, out)
			return
		}
		err := poll(awsStepLimit, func() string {
			ec2, err := s.cloud.instances()
			if err != nil {
				return err.Error()
			}
			members, err := s.cloud.targets()
			if err != nil {
				return err.Error()
			}
			if n := len(s.instances()); len(ec2) != 0 || len(members) != 0 || n != 0 {
				return fmt.Sprintf("herd has %d instances; EC2 runs %d of the fleet: %v; the target group has %d members: %v", n, len(ec2), ec2, len(members), members)
			}
			return ""
		})
		if err != nil {
			t.Errorf("the fleet deleted: %v", err)
			return
		}
		t.Log("the fleet deleted: EC2 runs none of its instances and the target group has no member")
	})
}
