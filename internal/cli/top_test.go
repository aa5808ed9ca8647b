package cli

import (
	"encoding/json"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/apiserver"
	"herd.dev/herd/internal/client"
	"herd.dev/herd/internal/store"
	"herd.dev/herd/internal/store/memory"
)

// topEnv is an in-process API server whose usage report has fleet web's two instances: web-a with
// every figure, web-b booting with none yet.
func topEnv(t *testing.T) string {
	st := memory.New()
	t.Cleanup(func() { _ = st.Close() })
	op, _ := store.PutOp(store.Fleets, &v1alpha1.Fleet{Metadata: v1alpha1.ObjectMeta{Name: "web"}})
	ops := []store.Op{op}
	for name, phase := range map[string]v1alpha1.InstancePhase{"web-a": v1alpha1.PhaseReady, "web-b": v1alpha1.PhaseBooting} {
		in := &v1alpha1.Instance{Metadata: v1alpha1.ObjectMeta{Name: name}}
		in.Spec.Fleet, in.Spec.Region, in.Status.Phase = "web", "local", phase
		op, _ := store.PutOp(store.Instances, in)
		ops = append(ops, op)
	}
	if _, err := st.Txn(t.Context(), ops...); err != nil {
		t.Fatal(err)
	}
	f := func(v float64) *float64 { return &v }
	figures := map[string]apiserver.Usage{"web-a": {CPUCores: f(0.25), MemoryBytes: f(300 << 20), RequestsPerSecond: f(12.34),
		LatencyP95Seconds: f(0.0123), Errors5xxPerSecond: f(0.5)}}
	const token = "0123456789abcdef0123456789abcdef"
	srv := httptest.NewServer(apiserver.New(apiserver.Options{Store: st, Token: token, Usage: func(insts []*v1alpha1.Instance) apiserver.UsageReport {
		r := apiserver.UsageReport{WindowSeconds: 10, Fleets: []apiserver.FleetUsage{{Fleet: "web", Instances: len(insts), Usage: figures["web-a"]}}}
		for _, in := range insts {
			r.Instances = append(r.Instances, apiserver.InstanceUsage{Fleet: in.Spec.Fleet, Region: in.Spec.Region, Instance: in.Metadata.Name,
				Phase: in.Status.Phase, Usage: figures[in.Metadata.Name]})
		}
		return r
	}}))
	t.Cleanup(srv.Close)
	config := filepath.Join(t.TempDir(), "config")
	if err := client.SaveConfig(config, &client.Config{Server: srv.URL, Token: token}); err != nil {
		t.Fatal(err)
	}
	return config
}

func runTop(t *testing.T, config string, args ...string) (string, error) {
	var out, errOut strings.Builder
	cmd := NewRootCmd(&out, &errOut)
	cmd.SetArgs(append([]string{"--config", config, "top"}, args...))
	err := cmd.ExecuteContext(t.Context())
	return out.String(), err
}

func TestTopTables(t *testing.T) {
	config := topEnv(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"instances"}, `NAME    FLEET   REGION   PHASE     CPU(cores)   MEMORY(bytes)   REQ/S       P95         5XX/S
web-a   web     local    Ready     250m         300Mi           12.3        12.3ms      0.5
web-b   web     local    Booting   <unknown>    <unknown>       <unknown>   <unknown>   <unknown>
`},
		{[]string{"instances", "web-a", "--fleet", "web"}, `NAME    FLEET   REGION   PHASE   CPU(cores)   MEMORY(bytes)   REQ/S   P95      5XX/S
web-a   web     local    Ready   250m         300Mi           12.3    12.3ms   0.5
`},
		{[]string{"fleets"}, `NAME   INSTANCES   CPU(cores)   MEMORY(bytes)   REQ/S   P95      5XX/S
web    2           250m         300Mi           12.3    12.3ms   0.5
`},
	} {
		out, err := runTop(t, config, tc.args...)
		if err != nil || out != tc.want {
			t.Errorf("herd top %v: %v\n%s\nwant:\n%s", tc.args, err, out, tc.want)
		}
	}
}

func TestTopJSON(t *testing.T) {
	out, err := runTop(t, topEnv(t), "instances", "-o", "json")
	var insts []apiserver.InstanceUsage
	if err != nil || json.Unmarshal([]byte(out), &insts) != nil || len(insts) != 2 || insts[0].RequestsPerSecond == nil ||
		*insts[0].RequestsPerSecond != 12.34 || insts[1].CPUCores != nil || !strings.Contains(out, `"errors5xxPerSecond": 0.5`) {
		t.Errorf("herd top instances -o json: %v\n%s", err, out)
	}
}

func TestTopBadInput(t *testing.T) {
	config := topEnv(t)
	for _, tc := range []struct {
		args []string
		want string // in the error
	}{
		{[]string{"pods"}, `unknown resource "pods": use fleets or instances`},
		{[]string{"fleets", "nope"}, `fleet "nope" not found`},
		{[]string{"instances", "--fleet", "nope"}, `fleet "nope" not found`},
		{[]string{"instances", "web-z"}, `instance "web-z" not found`},
		{[]string{"instances", "-o", "xml"}, "-o xml"},
		{[]string{"fleets", "web", "--fleet", "api"}, "--fleet api and fleet web"},
	} {
		if out, err := runTop(t, config, tc.args...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("herd top %v: %v (%q), want an error with %q", tc.args, err, out, tc.want)
		}
	}
}
