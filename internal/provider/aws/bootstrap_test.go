package aws_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"herd.dev/herd/internal/agent/ec2meta"
	"herd.dev/herd/internal/agentauth"
	"herd.dev/herd/internal/provider/aws"
	"herd.dev/herd/internal/provider/aws/awstwin"
)

// bundleDigest is a digest the bootstrap takes: an agent checks it names a bundle.
const bundleDigest = "sha256:" + "ab12cd34ef56ab12cd34ef56ab12cd34ef56ab12cd34ef56ab12cd34ef56ab12"

// An instance launched by the provider finds out, as its agent does on EC2, who it is from its
// metadata service, IMDSv2 only, and how to boot from its user data: its name, its credential
// (the one herd up derives for it), the bundle to boot and where herd up is; and it hears of a
// spot interruption from the metadata service too.
func TestAgentReadsItsIdentityAndBootstrapFromIMDSv2(t *testing.T) {
	tw, opts := setup(t, awstwin.Options{})
	tw.AddImage(ec2Region, "herd-node-2", map[string]string{"herd.dev/image": bundleDigest})
	keys, err := agentauth.NewKeyring([]byte(strings.Repeat("k", 32)))
	if err != nil {
		t.Fatal(err)
	}
	p, err := aws.New(aws.Options{Installation: "boot", Credentials: tw.Credentials(), StateDir: t.TempDir(),
		AgentKeys: keys, HerdUp: "https://herd.example:7443", RateLimit: 200, RateBurst: 20})
	if err != nil {
		t.Fatal(err)
	}
	sp := spec("web-1", "web", opts)
	sp.Image = bundleDigest
	ctx := context.Background()
	if _, err := p.Create(ctx, sp); err != nil {
		t.Fatal(err)
	}
	in := tw.Instances()[0]
	url := tw.MetadataURL(in.ID)

	// IMDSv2 only: a GET without a session token is refused.
	resp, err := http.Get(url + "/latest/meta-data/instance-id")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a GET without a token: %s, want 401 Unauthorized", resp.Status)
	}

	md := ec2meta.New(url)
	id, err := md.Identity(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := ec2meta.Bootstrap{Version: ec2meta.BootstrapVersion, Name: "web-1", HerdUp: "https://herd.example:7443",
		Credential: keys.Credential("web-1"), Image: bundleDigest}
	if id.InstanceID != in.ID || id.LocalIPv4.String() != in.PrivateIP || id.AvailabilityZone != in.AvailabilityZone ||
		id.Region != ec2Region || id.Bootstrap != want {
		t.Fatalf("identity = %+v, want instance %s at %s in %s and bootstrap %+v", id, in.ID, in.PrivateIP, in.AvailabilityZone, want)
	}

	if n, err := md.Interruption(ctx); err != nil || n != nil {
		t.Fatalf("interruption before any notice = %+v, %v; want none", n, err)
	}
	at := time.Now().Add(2 * time.Minute).UTC().Truncate(time.Second)
	go func() {
		time.Sleep(50 * time.Millisecond)
		_ = tw.InterruptSpot(in.ID, "terminate", at)
	}()
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	n, err := md.WatchInterruption(wctx, 20*time.Millisecond, func(err error) { t.Errorf("asking for a notice: %v", err) })
	if err != nil || n.Action != "terminate" || !n.Time.Equal(at) {
		t.Fatalf("notice = %+v, %v; want terminate at %s", n, err, at)
	}

	// A region's herdUp option says where its instances reach herd up, in place of the default.
	opts["herdUp"] = "https://10.0.0.5:7443"
	sp = spec("web-2", "web", opts)
	sp.Image = bundleDigest
	if _, err := p.Create(ctx, sp); err != nil {
		t.Fatal(err)
	}
	id, err = ec2meta.New(tw.MetadataURL(live(tw)["web-2"])).Identity(ctx)
	if err != nil || id.Bootstrap.HerdUp != "https://10.0.0.5:7443" {
		t.Fatalf("web-2 of a region with herdUp: bootstrap %+v, %v; want herd up at the option's URL", id.Bootstrap, err)
	}
}

// User data that is not herd's bootstrap, or misses what the agent needs, is refused naming
// what is wrong.
func TestParseBootstrapNamesWhatIsWrong(t *testing.T) {
	for _, tt := range []struct{ data, want string }{
		{`#!/bin/sh`, "not herd's bootstrap"},
		{`{"version":2,"name":"a","credential":"c","image":"` + bundleDigest + `"}`, "version 2"},
		{`{"version":1,"credential":"c","image":"` + bundleDigest + `"}`, "name is missing"},
		{`{"version":1,"name":"a","image":"` + bundleDigest + `"}`, "credential is missing"},
		{`{"version":1,"name":"a","credential":"c","image":"sha256:12"}`, "is not a bundle digest"},
	} {
		if _, err := ec2meta.ParseBootstrap([]byte(tt.data)); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("ParseBootstrap(%s) = %v, want an error with %q", tt.data, err, tt.want)
		}
	}
}
