package cpmetrics

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"herd.dev/herd/internal/agentmetrics"
	"herd.dev/herd/internal/lb"
	"herd.dev/herd/internal/store/memory"
)

// rulesDir holds the example alert rules shipped with herd and their promtool unit tests.
const rulesDir = "../../docs/prometheus"

func promtool(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool not found: it comes with Debian's prometheus package (hack/install-deps.sh installs it)")
	}
	return bin
}

// The shipped rules are valid (promtool check rules) and fire as their tests say (promtool test
// rules: a fleet below min, a failing canary, an unreachable region, a flapping instance, ...).
func TestAlertRulesPassPromtool(t *testing.T) {
	bin := promtool(t)
	for _, args := range [][]string{{"check", "rules", "herd-rules.yml"}, {"test", "rules", "herd-rules_test.yml"}} {
		cmd := exec.Command(bin, args...)
		cmd.Dir = rulesDir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool %v: %v\n%s", args, err, out)
		}
	}
}

// promtool accepts any metric name; this checks that every herd_ family the rules use is one
// herd up serves, so that a renamed family cannot leave a rule that silently never fires.
func TestAlertRulesUseServedFamilies(t *testing.T) {
	rules, err := os.ReadFile(filepath.Join(rulesDir, "herd-rules.yml"))
	if err != nil {
		t.Fatal(err)
	}
	scraper, err := agentmetrics.New(agentmetrics.Options{Targets: func() []agentmetrics.Target { return nil }, Port: 1})
	if err != nil {
		t.Fatal(err)
	}
	served := map[string]bool{}
	descs := make(chan *prometheus.Desc)
	go func() {
		defer close(descs)
		for _, c := range []prometheus.Collector{New(fakeController{}, memory.New(), nil), NewQueueMetrics(),
			lb.New(lb.Options{}).Collector(), scraper.Collector()} {
			c.Describe(descs)
		}
	}()
	fqName := regexp.MustCompile(`fqName: "([^"]+)"`)
	for d := range descs {
		if m := fqName.FindStringSubmatch(d.String()); m != nil {
			served[m[1]] = true
		}
	}
	used := regexp.MustCompile(`\bherd_[a-z_]+\b`).FindAllString(string(rules), -1)
	if len(used) == 0 {
		t.Fatal("the rules use no herd_ family")
	}
	for _, name := range used {
		if !served[name] {
			t.Errorf("the rules use %s, which herd up does not serve", name)
		}
	}
}
