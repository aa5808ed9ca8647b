package controlplane_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"herd.dev/herd/internal/controlplane"
	"herd.dev/herd/internal/provider/aws/awstwin"
)

// TestRoute53FollowsTheStore runs herd up with --route53-zone against the twin's Route 53, with
// credentials from the SDK's default chain: a fleet's spec.global hostname gets its region's load
// balancer address and herd's owner record in the zone once the region is healthy, and both
// leave the zone when the fleet is deleted.
func TestRoute53FollowsTheStore(t *testing.T) {
	tw := awstwin.New(t, awstwin.Options{})
	zone := tw.AddHostedZone("herd.test.")
	t.Setenv("AWS_ACCESS_KEY_ID", awstwin.DefaultAccessKeyID)
	t.Setenv("AWS_SECRET_ACCESS_KEY", awstwin.DefaultSecretAccessKey)
	t.Setenv("AWS_CONFIG_FILE", t.TempDir()+"/none")
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", t.TempDir()+"/none")
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	c, cl := inProcessWith(t, func(o *controlplane.Options) {
		o.Route53 = controlplane.Route53Options{ZoneID: zone, Endpoint: tw.URL}
	})
	applyManifest(t, cl, `apiVersion: herd.dev/v1alpha1
kind: Fleet
metadata: {name: web}
spec:
  image: sha256:0000000000000000000000000000000000000000000000000000000000000000
  replicas: {min: 1, max: 5, desired: 1}
  global: {hostname: web.herd.test}
`)
	web := func() []string {
		var out []string
		for _, rs := range tw.RecordSets(zone) {
			if strings.HasSuffix(rs.Name, "web.herd.test.") {
				out = append(out, fmt.Sprintf("%s %s %v", rs.Name, rs.Type, rs.Records))
			}
		}
		return out
	}
	c.waitFor(30*time.Second, func() string {
		got := web()
		if len(got) != 2 || !slices.Contains(got, "web.herd.test. A [{127.0.0.1}]") || !strings.Contains(strings.Join(got, " "), "herd/fleet=web") {
			return fmt.Sprintf("the zone holds %q: want web's A record 127.0.0.1 and herd's owner record", got)
		}
		return ""
	})
	if err := cl.DeleteFleet(context.Background(), "web"); err != nil {
		t.Fatal(err)
	}
	c.waitFor(30*time.Second, func() string {
		if got := web(); len(got) > 0 {
			return fmt.Sprintf("the zone still holds %q after the fleet's deletion", got)
		}
		return ""
	})
}
