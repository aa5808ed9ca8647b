package controlplane_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/agent/ec2meta"
	"herd.dev/herd/internal/agentauth"
	"herd.dev/herd/internal/controlplane"
	"herd.dev/herd/internal/freeport"
	"herd.dev/herd/internal/image/imagetest"
	"herd.dev/herd/internal/provider/aws/awstwin"
)

// A region with provider: aws runs on EC2 (the twin) whatever herd up's default provider is:
// its options are checked at apply, naming the field, and its instances are launched with herd's
// tags and a bootstrap that carries each instance's credential from herd up's key, and
// terminated when the fleet is deleted.
func TestAWSRegionRunsOnEC2(t *testing.T) {
	// The SDK's default credential chain, as herd up uses it, finds the twin's keys.
	t.Setenv("AWS_ACCESS_KEY_ID", awstwin.DefaultAccessKeyID)
	t.Setenv("AWS_SECRET_ACCESS_KEY", awstwin.DefaultSecretAccessKey)
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(t.TempDir(), "none"))
	tw := awstwin.New(t, awstwin.Options{})
	var dataDir, digest string
	_, cl := inProcessWith(t, func(o *controlplane.Options) {
		dataDir = o.DataDir
		digest = imagetest.WriteBundle(t, o.DataDir, "hello")
	})
	tw.AddImage("eu-west-1", "herd-node", map[string]string{"herd.dev/image": digest})
	fleet := func(options string) []v1alpha1.Fleet {
		docs, err := v1alpha1.Decode([]byte(fmt.Sprintf(`apiVersion: herd.dev/v1alpha1
kind: Fleet
metadata: {name: web}
spec:
  image: hello
  replicas: {min: 2, max: 2}
  listeners: [{port: %d, instancePort: 8080}]
  regions:
    - name: eu
      provider: aws
      options: {%s}
`, freeport.TCP(t), options)))
		if err != nil {
			t.Fatal(err)
		}
		return []v1alpha1.Fleet{*docs[0].Object.(*v1alpha1.Fleet)}
	}
	ctx := context.Background()
	_, err := cl.Apply(ctx, fleet(`region: eu-west-1, instanceTypes: "m7i.large,m6i.large", subnets: nope`))
	if err == nil || !strings.Contains(err.Error(), "options.subnets") || !strings.Contains(err.Error(), "subnet IDs") {
		t.Fatalf("apply with a bad subnet = %v, want it refused naming options.subnets", err)
	}
	if n := len(tw.Instances()); n != 0 {
		t.Fatalf("a refused apply launched %d instances", n)
	}
	if _, err := cl.Apply(ctx, fleet(`region: eu-west-1, instanceTypes: "m7i.large,m6i.large", endpoint: "`+tw.URL+`"`)); err != nil {
		t.Fatal(err)
	}
	keys, err := agentauth.Open(dataDir)
	if err != nil {
		t.Fatal(err)
	}
	running := func() []awstwin.Instance {
		var out []awstwin.Instance
		for _, in := range tw.Instances() {
			if in.State != awstwin.StateTerminated {
				out = append(out, in)
			}
		}
		return out
	}
	waitUntil(t, 30*time.Second, func() string {
		if n := len(running()); n != 2 {
			return fmt.Sprintf("%d instances on EC2, want 2", n)
		}
		return ""
	})
	for _, in := range running() {
		data, err := base64.StdEncoding.DecodeString(in.UserData)
		if err != nil {
			t.Fatal(err)
		}
		b, err := ec2meta.ParseBootstrap(data)
		if err != nil {
			t.Fatal(err)
		}
		name := in.Tags["herd.dev/instance"]
		if in.Tags[v1alpha1.LabelFleet] != "web" || in.Tags["herd.dev/installation"] != keys.ID() ||
			b.Name != name || b.Credential != keys.Credential(name) || b.Image != digest {
			t.Errorf("instance %s: tags %v, bootstrap %+v; want fleet web, this installation, and %s's credential and image", in.ID, in.Tags, b, name)
		}
	}
	if err := cl.DeleteFleet(ctx, "web"); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 30*time.Second, func() string {
		if n := len(running()); n != 0 {
			return fmt.Sprintf("%d instances left on EC2 after the fleet's deletion", n)
		}
		return ""
	})
}

// waitUntil waits until cond returns "", failing with its last answer after timeout.
func waitUntil(t *testing.T, timeout time.Duration, cond func() string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		why := cond()
		if why == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal(why)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
