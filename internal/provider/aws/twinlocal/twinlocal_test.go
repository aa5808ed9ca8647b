package twinlocal

import (
	"context"
	"encoding/base64"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"

	"herd.dev/herd/internal/provider/aws/awstwin"
)

const region = "eu-west-1"

// An instance's requests to the metadata service are answered by its own metadata service in the
// twin, told by their source address as EC2 tells them apart, IMDSv2's session tokens included;
// an address no instance has gets nothing.
func TestMetadataOfTheCallersInstance(t *testing.T) {
	tw := awstwin.New(t, awstwin.Options{})
	ami := tw.AddImage(region, "node", map[string]string{ImageTag: "sha256:" + strings.Repeat("a", 64)})
	c := tw.Client(region)
	launch := func(userData string) (id, addr string) {
		t.Helper()
		out, err := c.RunInstances(context.Background(), &ec2.RunInstancesInput{
			ImageId: aws.String(ami), MinCount: aws.Int32(1), MaxCount: aws.Int32(1),
			UserData: aws.String(base64.StdEncoding.EncodeToString([]byte(userData))),
		})
		if err != nil {
			t.Fatal(err)
		}
		return aws.ToString(out.Instances[0].InstanceId), aws.ToString(out.Instances[0].PrivateIpAddress)
	}
	idA, addrA := launch(`{"name":"a"}`)
	idB, addrB := launch(`{"name":"b"}`)
	b := &Backend{tw: tw, proxy: &http.Transport{Proxy: nil}}
	ask := func(from, method, path, token string) (int, string) {
		t.Helper()
		r := httptest.NewRequest(method, path, nil)
		r.RemoteAddr = from + ":40000"
		if token != "" {
			r.Header.Set("X-aws-ec2-metadata-token", token)
		}
		r.Header.Set("X-aws-ec2-metadata-token-ttl-seconds", "60")
		w := httptest.NewRecorder()
		b.serveMetadata(w, r)
		body, _ := io.ReadAll(w.Result().Body)
		return w.Code, string(body)
	}
	for _, in := range []struct{ addr, id, userData string }{{addrA, idA, `{"name":"a"}`}, {addrB, idB, `{"name":"b"}`}} {
		code, token := ask(in.addr, http.MethodPut, "/latest/api/token", "")
		if code != http.StatusOK || token == "" {
			t.Fatalf("a session token from %s: %d %q", in.addr, code, token)
		}
		if code, id := ask(in.addr, http.MethodGet, "/latest/meta-data/instance-id", token); code != http.StatusOK || id != in.id {
			t.Errorf("instance-id asked from %s: %d %q, want %s", in.addr, code, id, in.id)
		}
		if code, ud := ask(in.addr, http.MethodGet, "/latest/user-data", token); code != http.StatusOK || ud != in.userData {
			t.Errorf("user-data asked from %s: %d %q, want %q", in.addr, code, ud, in.userData)
		}
		if code, _ := ask(in.addr, http.MethodGet, "/latest/meta-data/instance-id", ""); code != http.StatusUnauthorized {
			t.Errorf("instance-id asked from %s without a token: %d, want 401 (IMDSv2 only)", in.addr, code)
		}
	}
	if code, body := ask("10.255.255.254", http.MethodPut, "/latest/api/token", ""); code != http.StatusNotFound {
		t.Errorf("a token asked from an address no instance has: %d %q, want 404", code, body)
	}
}

// An AMI that names no bundle boots nothing: RunInstances fails instead of booting a guess.
func TestLaunchWantsTheImageTag(t *testing.T) {
	b := &Backend{}
	_, err := b.Launch(awstwin.Instance{ID: "i-1", Region: region}, awstwin.Image{ID: "ami-1", Tags: map[string]string{"Name": "node"}})
	if err == nil || !strings.Contains(err.Error(), ImageTag) {
		t.Fatalf("launch from an AMI without %s: %v, want an error naming the tag", ImageTag, err)
	}
}
