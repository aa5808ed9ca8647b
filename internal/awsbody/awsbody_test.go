package awsbody

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"testing"

	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// sdkBody is a request body as smithy-go hands it to the HTTP client.
func sdkBody(t *testing.T, payload []byte) *http.Request {
	t.Helper()
	req := smithyhttp.NewStackRequest().(*smithyhttp.Request)
	req.Method = http.MethodPost
	req.ContentLength = int64(len(payload))
	req, err := req.SetStream(bytes.NewReader(payload))
	if err != nil {
		t.Fatal(err)
	}
	return req.Build(context.Background())
}

// The check net/http makes after writing a body of known length (copy what is left to
// io.Discard) fails on smithy-go's closed body, and passes on the wrapped one.
func TestClosedBodyEndsWithoutError(t *testing.T) {
	payload := []byte("Action=DescribeInstances&Version=2016-11-15")

	bare := sdkBody(t, payload)
	if _, err := io.ReadFull(bare.Body, make([]byte, len(payload))); err != nil {
		t.Fatal(err)
	}
	bare.Body.Close()
	if _, err := io.Copy(io.Discard, bare.Body); err == nil {
		t.Fatal("smithy-go's closed body copied without error: the race this package works around is gone, and so may the package be")
	}

	var seen http.Request
	wrapped := Wrap(doer(func(req *http.Request) (*http.Response, error) { seen = *req; return nil, nil }))
	req := sdkBody(t, payload)
	wrapped.Do(req)
	if _, ok := seen.Body.(io.WriterTo); ok {
		t.Fatalf("the wrapped body is still an io.WriterTo: %T", seen.Body)
	}
	if _, err := io.ReadFull(seen.Body, make([]byte, len(payload))); err != nil {
		t.Fatal(err)
	}
	req.Body.Close()
	if n, err := io.Copy(io.Discard, seen.Body); n != 0 || err != nil {
		t.Fatalf("after the close, the wrapped body copied %d bytes, %v; want 0, nil", n, err)
	}
}

// A request through the wrapped client reaches a real server with its whole body.
func TestBodyArrivesWhole(t *testing.T) {
	payload := bytes.Repeat([]byte("x"), 100_000)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		io.WriteString(w, strconv.Itoa(len(b)))
	}))
	t.Cleanup(srv.Close)
	req := sdkBody(t, payload)
	req.URL, req.Host = mustURL(t, srv.URL), ""
	resp, err := Wrap(srv.Client()).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got, _ := io.ReadAll(resp.Body)
	if string(got) != strconv.Itoa(len(payload)) {
		t.Fatalf("server read %s bytes, want %d", got, len(payload))
	}
}

type doer func(*http.Request) (*http.Response, error)

func (d doer) Do(req *http.Request) (*http.Response, error) { return d(req) }

func mustURL(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}
