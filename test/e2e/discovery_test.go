package e2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/agent/cgroups"
	"herd.dev/herd/internal/freeport"
	"herd.dev/herd/internal/global/routes"
	"herd.dev/herd/internal/provider/local"
	"herd.dev/herd/internal/provider/local/localtest"
)

// The fleets of the discovery test: api in both regions, published to web only; web and batch,
// its callers, in the near region.
const (
	apiFleet, webFleet, batchFleet = "api", "web", "batch"
	discoveryZone                  = "herd.internal"
)

// discoveryScenario is a herd up serving the discovery DNS on every address of the host, with
// api in regions eu and us (one instance each) allowing calls from web only, and web and batch
// (one instance each) in eu.
type discoveryScenario struct {
	*env
	ports map[string]int // each fleet's listener port
}

// fleetSpec is a fleet of hello with one instance per region and a listener on port.
func fleetSpec(name string, port int, extra string, regions ...string) string {
	var rs strings.Builder
	for _, r := range regions {
		fmt.Fprintf(&rs, "  - {name: %s, provider: local}\n", r)
	}
	return fmt.Sprintf(`apiVersion: herd.dev/v1alpha1
kind: Fleet
metadata: {name: %s}
spec:
  image: hello
  replicas: {min: 1, max: 2, desired: 1}
  listeners: [{name: http, port: %d, instancePort: %d, protocol: http}]
  healthCheck: {path: /healthz, port: %d, interval: 250ms, timeout: 200ms, unhealthyThreshold: 2, healthyThreshold: 1, gracePeriod: %s}
%s  regions:
%s`, name, port, helloPort, helloPort, regionsGrace, extra, rs.String())
}

func startDiscoveryScenario(t *testing.T) *discoveryScenario {
	e := newEnv(t, withHello)
	before := localtest.Take(t)
	e.regions = []string{nearRegion, farRegion}
	localtest.CleanupOnInterrupt(t, func() { e.cleanup(before) })
	// Every address: each instance asks the DNS, and herd up's own load balancer (which serves
	// the one-region fleets web and batch), at its own bridge's address (docs/discovery.md).
	// The later --lb-address wins over startUp's.
	e.upArgs = []string{"--discovery-listen", "0.0.0.0:" + strconv.Itoa(freeport.TCP(t)), "--lb-address", "0.0.0.0"}
	e.startUp()
	s := &discoveryScenario{env: e, ports: map[string]int{}}
	for _, f := range []string{apiFleet, webFleet, batchFleet} {
		s.ports[f] = freeport.TCP(t)
	}
	start := time.Now()
	s.applyFleet([]byte(strings.Join([]string{
		fleetSpec(apiFleet, s.ports[apiFleet], "  discovery: {allowFrom: [web]}\n", nearRegion, farRegion),
		fleetSpec(webFleet, s.ports[webFleet], "", nearRegion),
		fleetSpec(batchFleet, s.ports[batchFleet], "", nearRegion),
	}, "---\n")))
	s.waitServing(4)
	t.Logf("4 instances of 3 fleets in 2 regions serving %.1f s after the apply", time.Since(start).Seconds())
	return s
}

// instanceOf is the name of fleet's instance in region; the test fails when there is none.
func (s *discoveryScenario) instanceOf(fleet, region string) string {
	s.t.Helper()
	for _, in := range s.instances() {
		if in.Spec.Fleet == fleet && in.Spec.Region == region && in.Status.Phase == v1alpha1.PhaseReady {
			return in.Metadata.Name
		}
	}
	s.t.Fatalf("fleet %s has no Ready instance in region %s", fleet, region)
	return ""
}

// errNoAnswer is a GET made in a pod that got no answer; its message is the pod's error.
var errNoAnswer = errors.New("no answer")

// getFrom makes one GET of url from inside the hello pod of instance inst (`/hello -get`, run by
// kubectl exec through herd up's proxy), so that the call uses the pod's own DNS and network,
// with host as its Host header unless it is "". It returns the answer's status line and body; an
// error wrapping errNoAnswer when the pod's call got no answer (the error it printed); another
// error when the exec itself failed.
func (s *discoveryScenario) getFrom(inst, url, host string) (status, body string, err error) {
	cmd := exec.Command(s.bin, "kubectl", inst, "--", "exec", "-n", "default", "deploy/hello", "-c", "hello", "--", "/hello", "-get", url, "-host", host)
	cmd.Env = append(os.Environ(), "HERD_CONFIG="+filepath.Join(s.dir, "config"))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		for _, l := range strings.Split(stderr.String(), "\n") {
			if msg, ok := strings.CutPrefix(l, "hello: "); ok {
				return "", "", fmt.Errorf("%w: %s", errNoAnswer, msg)
			}
		}
		return "", "", fmt.Errorf("herd kubectl %s -- exec: %v: %s", inst, err, strings.TrimSpace(stderr.String()))
	}
	status, body, _ = strings.Cut(string(out), "\n")
	return status, body, nil
}

// answer waits until inst's pod gets an answer from url (with Host host, unless ""), retrying
// only a failed exec, and returns it.
func (s *discoveryScenario) answer(inst, url, host string) (status, body string, err error) {
	s.t.Helper()
	s.waitFor(time.Minute, time.Second, func() string {
		status, body, err = s.getFrom(inst, url, host)
		if err != nil && !errors.Is(err, errNoAnswer) {
			return err.Error()
		}
		return ""
	})
	return status, body, err
}

// answeredBy is the instance of fleet that answered a hello body, and its region.
func (s *discoveryScenario) answeredBy(fleet, status, body string) (instance, region string, err error) {
	if status != "200 OK" {
		return "", "", fmt.Errorf("answer %q %q, want 200 OK from %s", status, body, fleet)
	}
	var reply struct {
		Instance string `json:"instance"`
	}
	if err := json.Unmarshal([]byte(body), &reply); err != nil || reply.Instance == "" {
		return "", "", fmt.Errorf("answer %q, want hello's JSON naming its instance", body)
	}
	for _, in := range s.instances() {
		if in.Metadata.Name == reply.Instance {
			if in.Spec.Fleet != fleet {
				return "", "", fmt.Errorf("answered by instance %s of fleet %s, want fleet %s", in.Metadata.Name, in.Spec.Fleet, fleet)
			}
			return reply.Instance, in.Spec.Region, nil
		}
	}
	return "", "", fmt.Errorf("answered by %s, which is no instance herd has", reply.Instance)
}

// apiAnswer is the api instance that answered a hello body, and its region.
func (s *discoveryScenario) apiAnswer(status, body string) (instance, region string, err error) {
	return s.answeredBy(apiFleet, status, body)
}

// TestIntegrationDiscovery calls fleet api by its discovery name alone (http://api.herd.internal/,
// port 80) from inside the pod of fleet web's instance, on real instances in two regions: api
// answers from web's own region, by the name with its listener's port too; with api's instance
// there killed, from the other region; and fleet batch, which api's allowFrom leaves out, gets no
// such host for the name and 403 from api's load balancer at its address (on port 80 with api's
// name as Host, and on api's port), while it calls web, which allows every fleet, by its name
// alone through herd up's own load balancer.
func TestIntegrationDiscovery(t *testing.T) {
	s := startDiscoveryScenario(t)
	web := s.instanceOf(webFleet, nearRegion)
	batch := s.instanceOf(batchFleet, nearRegion)
	apiName := apiFleet + "." + discoveryZone
	url := "http://" + apiName + "/"
	var failover time.Duration
	defer func() { t.Logf("discovery: other_region_answer_after_kill_s=%.2f", failover.Seconds()) }()
	run := func(name string, step func(t *testing.T)) { s.subtest(t, name, step) }

	run("same-region", func(t *testing.T) {
		withPort := fmt.Sprintf("http://%s:%d/", apiName, s.ports[apiFleet])
		for i, u := range []string{url, url, url, withPort} {
			status, body, err := s.answer(web, u, "")
			if err != nil {
				t.Fatalf("GET %s from web's pod: %v", u, err)
			}
			in, region, err := s.apiAnswer(status, body)
			if err != nil {
				t.Fatalf("GET %s from web's pod: %v", u, err)
			}
			if region != nearRegion {
				t.Fatalf("GET %s from web's pod in region %s answered by %s of region %s, want api's instance in %s", u, nearRegion, in, region, nearRegion)
			}
			if i == 0 || u == withPort {
				t.Logf("GET %s from web's pod in region %s: answered by api's instance %s of region %s", u, nearRegion, in, region)
			}
		}
	})

	run("allow-from", func(t *testing.T) {
		// batch's pod resolves and calls a fleet that takes calls from every fleet: web, which
		// herd up's own load balancer serves (one region, no options), on its bridge address.
		webURL := "http://" + webFleet + "." + discoveryZone + "/"
		status, body, err := s.answer(batch, webURL, "")
		if in, _, aerr := s.answeredBy(webFleet, status, body); err != nil || aerr != nil || in != web {
			t.Errorf("GET %s from batch's pod: %q %q %v %v, want web's answer from %s", webURL, status, body, err, aerr, web)
		}
		_, _, err = s.answer(batch, url, "")
		if !errors.Is(err, errNoAnswer) || !strings.Contains(err.Error(), "no such host") {
			t.Errorf("GET %s from batch's pod: %v, want no such host (api allows calls from web only)", url, err)
		} else {
			t.Logf("GET %s from batch's pod: %v", url, err)
		}
		// The name is not a wall: batch calling api's load balancer at its address is refused
		// there, on port 80 with api's name as Host and on api's own port; a Host that names
		// no fleet gets 404.
		addr := s.discoveryAddress(apiFleet, nearRegion)
		port80 := "http://" + addr + "/"
		direct := "http://" + net.JoinHostPort(addr, strconv.Itoa(s.ports[apiFleet])) + "/"
		for _, call := range []struct{ url, host string }{{port80, apiName}, {direct, ""}} {
			status, body, err = s.answer(batch, call.url, call.host)
			if err != nil || status != "403 Forbidden" || !strings.Contains(body, "fleet batch") || !strings.Contains(body, "allowFrom") {
				t.Errorf("GET %s (Host %q, api's load balancer in %s) from batch's pod: %q %q %v, want 403 naming fleet batch and allowFrom", call.url, call.host, nearRegion, status, body, err)
			} else {
				t.Logf("GET %s (Host %q) from batch's pod: %s %s", call.url, call.host, status, strings.TrimSpace(body))
			}
		}
		status, body, err = s.answer(batch, port80, "")
		if err != nil || status != "404 Not Found" || !strings.Contains(body, addr) {
			t.Errorf("GET %s (no fleet's name as Host) from batch's pod: %q %q %v, want 404 naming the host", port80, status, body, err)
		}
		// And web, at the same address and port 80 with api's name, is served.
		status, body, err = s.answer(web, port80, apiName)
		if _, region, aerr := s.apiAnswer(status, body); err != nil || aerr != nil || region != nearRegion {
			t.Errorf("GET %s (Host %s) from web's pod: %q %q %v %v, want api's answer from region %s", port80, apiName, status, body, err, aerr, nearRegion)
		}
	})

	run("other-region", func(t *testing.T) {
		victim := s.instanceOf(apiFleet, nearRegion)
		killed := time.Now()
		// A replacement boots in seconds on a quiet machine: every api instance in eu is killed as
		// it appears until the answer from us, so that eu has no Ready instance of api meanwhile.
		stop := s.keepKilled(apiFleet, nearRegion)
		defer stop()
		t.Logf("killing every instance of api in region %s (%s first)", nearRegion, victim)
		var last string
		s.waitFor(3*time.Minute, time.Second, func() string {
			// A call whose name is still cached for eu is held by eu's load balancer, which has
			// no instance left, until the pod's client gives up; the next call resolves again.
			status, body, err := s.getFrom(web, url, "")
			if err != nil {
				last = err.Error()
				return "GET from web's pod after the kill: " + last
			}
			in, region, err := s.apiAnswer(status, body)
			if err != nil {
				last = err.Error()
				return "GET from web's pod after the kill: " + last
			}
			if region != farRegion {
				t.Fatalf("GET %s from web's pod answered by %s of region %s while every api instance there is killed, want region %s (last other outcome: %s)",
					url, in, region, farRegion, last)
			}
			failover = time.Since(killed)
			t.Logf("GET %s from web's pod answered by api's instance %s of region %s %.1f s after the kill (last other outcome: %s)",
				url, in, region, failover.Seconds(), last)
			return ""
		})
	})
}

// keepKilled kills -9 every process of every instance of fleet in region, again and again as
// replacements appear, until the returned stop is called; stop returns once the killing has.
func (s *discoveryScenario) keepKilled(fleet, region string) (stop func()) {
	hs, err := cgroups.Hierarchies()
	if err != nil {
		s.t.Fatal(err)
	}
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			for _, in := range s.instances() {
				if in.Spec.Fleet == fleet && in.Spec.Region == region {
					_, _, root := local.HostNames(in.Metadata.Name)
					cgroups.KillAll(hs, root, nil, 10*time.Second)
				}
			}
			select {
			case <-quit:
				return
			case <-tick.C:
			}
		}
	}()
	return sync.OnceFunc(func() { close(quit); <-done })
}

// discoveryAddress is the address herd's discovery DNS gives for fleet's region: where the
// region's instances reach the fleet's load balancer (herd get routes).
func (s *discoveryScenario) discoveryAddress(fleet, region string) string {
	s.t.Helper()
	var addr string
	s.waitFor(30*time.Second, 500*time.Millisecond, func() string {
		out, err := s.herd("get", "routes", fleet, "-o", "json")
		if err != nil {
			return "herd get routes: " + out
		}
		var table routes.Table
		if err := json.Unmarshal([]byte(out), &table); err != nil {
			return fmt.Sprintf("herd get routes -o json: %v", err)
		}
		for _, r := range table.Discovery {
			for _, rg := range r.Regions {
				if r.Fleet == fleet && rg.Name == region && len(rg.Addresses) > 0 {
					addr = rg.Addresses[0].String()
					return ""
				}
			}
		}
		return "herd get routes has no address for " + fleet + " in " + region + ":\n" + out
	})
	return addr
}
