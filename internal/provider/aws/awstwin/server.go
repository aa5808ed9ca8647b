package awstwin

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/xml"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
)

// apiVersion is the EC2 API version the twin speaks, the one every current SDK sends.
const apiVersion = "2016-11-15"

// apiError is an answer in EC2's error document.
type apiError struct {
	status        int
	code, message string
}

func (e *apiError) Error() string { return e.code + ": " + e.message }

func errorf(status int, code, format string, args ...any) *apiError {
	return &apiError{status: status, code: code, message: fmt.Sprintf(format, args...)}
}

// request is one call, its form and the region its signature is scoped to.
type request struct {
	action string
	form   url.Values
	region string
}

// ServeHTTP answers one call: Route 53's (route53.go) and the EBS direct APIs' (ebs.go) by their
// paths, ELBv2's (elbv2.go) by the service its signature names, EC2's Query API otherwise.
func (tw *Twin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if strings.HasPrefix(r.URL.Path, route53Prefix) {
		tw.serveRoute53(w, r)
		return
	}
	if strings.HasPrefix(r.URL.Path, "/snapshots") {
		tw.serveEBS(w, r) // the EBS direct APIs (ebs.go)
		return
	}
	if signedFor(r) == elbService {
		tw.serveELB(w, r) // ELBv2's Query API (elbv2.go)
		return
	}
	requestID := newRequestID()
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		writeError(w, requestID, errorf(http.StatusBadRequest, "InvalidRequest", "read the request: %v", err))
		return
	}
	region, aerr := tw.authenticate(r, body, "ec2")
	if aerr != nil {
		writeError(w, requestID, aerr)
		return
	}
	form, err := url.ParseQuery(string(body))
	if r.Method != http.MethodPost || err != nil || r.Header.Get("Content-Type") != "" && !strings.HasPrefix(r.Header.Get("Content-Type"), "application/x-www-form-urlencoded") {
		writeError(w, requestID, errorf(http.StatusBadRequest, "InvalidRequest", "the twin takes form-encoded POSTs of EC2's Query API"))
		return
	}
	req := request{action: form.Get("Action"), form: form, region: region}
	if v := form.Get("Version"); v != apiVersion {
		writeError(w, requestID, errorf(http.StatusBadRequest, "InvalidParameterValue", "unsupported API version %q: the twin speaks %s", v, apiVersion))
		return
	}
	answer, aerr := tw.call(req)
	if aerr != nil {
		writeError(w, requestID, aerr)
		return
	}
	setRequestID(answer, requestID)
	var buf bytes.Buffer
	buf.WriteString(xml.Header)
	if err := xml.NewEncoder(&buf).Encode(answer); err != nil {
		writeError(w, requestID, errorf(http.StatusInternalServerError, "InternalError", "encode the answer: %v", err))
		return
	}
	w.Header().Set("Content-Type", "text/xml;charset=UTF-8")
	w.Header().Set("x-amzn-RequestId", requestID)
	_, _ = w.Write(buf.Bytes())
}

// call counts the call, applies the faults that concern any action and runs the action.
func (tw *Twin) call(req request) (any, *apiError) {
	tw.mu.Lock()
	defer tw.mu.Unlock()
	tw.calls[req.action]++
	if over := tw.overLimit(req.region); over || tw.faults.throttle > 0 {
		if !over {
			tw.faults.throttle--
		}
		tw.faults.throttled++
		return nil, errorf(http.StatusServiceUnavailable, "RequestLimitExceeded", "Request limit exceeded.")
	}
	if tw.faults.denied[req.action] {
		return nil, errorf(http.StatusForbidden, "UnauthorizedOperation",
			"You are not authorized to perform this operation. User: arn:aws:iam::%s:user/herd is not authorized to perform: ec2:%s", OwnerID, req.action)
	}
	switch req.action {
	case "RunInstances":
		return tw.runInstances(req)
	case "DescribeInstances":
		return tw.describeInstances(req)
	case "TerminateInstances":
		return tw.terminateInstances(req)
	case "CreateTags":
		return tw.createTags(req)
	case "DescribeImages":
		return tw.describeImages(req)
	case "RegisterImage", "CopyImage", "DeregisterImage", "DescribeSnapshots", "DeleteSnapshot":
		return tw.imageAction(req) // images.go
	case "":
		return nil, errorf(http.StatusBadRequest, "MissingAction", "The request must contain the parameter Action.")
	}
	return nil, errorf(http.StatusBadRequest, "InvalidAction", "The action %s is not valid for this web service.", req.action)
}

func writeError(w http.ResponseWriter, requestID string, e *apiError) {
	w.Header().Set("Content-Type", "text/xml;charset=UTF-8")
	w.WriteHeader(e.status)
	out, _ := xml.Marshal(errorResponse{Code: e.code, Message: e.message, RequestID: requestID})
	_, _ = w.Write(append([]byte(xml.Header), out...))
}

func setRequestID(answer any, id string) {
	switch a := answer.(type) {
	case *runInstancesResponse:
		a.Namespace, a.RequestID = namespace, id
	case *describeInstancesResponse:
		a.Namespace, a.RequestID = namespace, id
	case *terminateInstancesResponse:
		a.Namespace, a.RequestID = namespace, id
	case *createTagsResponse:
		a.Namespace, a.RequestID = namespace, id
	case *describeImagesResponse:
		a.Namespace, a.RequestID = namespace, id
	case interface{ setHeader(string) }:
		a.setHeader(id)
	}
}

func newRequestID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

// authenticate checks the request's Signature Version 4 the way EC2 does (the canonical request
// from the signed headers and the body's hash, the key derived from the secret, the date, the
// region and the service) for service, and returns the region the signature is scoped to. The
// payload's hash is the X-Amz-Content-Sha256 header's when the client sent one
// (UNSIGNED-PAYLOAD for a block of the EBS direct APIs, whose data its checksum guards instead),
// and it must be the body's.
func (tw *Twin) authenticate(r *http.Request, body []byte, service string) (string, *apiError) {
	fail := func(format string, args ...any) (string, *apiError) {
		return "", errorf(http.StatusUnauthorized, "AuthFailure", "AWS was not able to validate the provided access credentials: "+format, args...)
	}
	auth := r.Header.Get("Authorization")
	const algorithm = "AWS4-HMAC-SHA256"
	if !strings.HasPrefix(auth, algorithm+" ") {
		return fail("the request is not signed with %s", algorithm)
	}
	parts := map[string]string{}
	for _, p := range strings.Split(strings.TrimPrefix(auth, algorithm+" "), ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(p), "=")
		parts[k] = v
	}
	scope := strings.Split(parts["Credential"], "/")
	if len(scope) != 5 || scope[3] != service || scope[4] != "aws4_request" {
		return fail("malformed credential scope %q", parts["Credential"])
	}
	if scope[0] != tw.opts.AccessKeyID {
		return fail("unknown access key %s", scope[0])
	}
	date := r.Header.Get("X-Amz-Date")
	signed := strings.Split(parts["SignedHeaders"], ";")
	var canon strings.Builder
	for _, h := range signed {
		v := strings.Join(r.Header.Values(h), ",")
		switch h {
		case "host":
			v = r.Host
		case "content-length":
			v = strconv.FormatInt(r.ContentLength, 10)
		}
		fmt.Fprintf(&canon, "%s:%s\n", h, strings.Join(strings.Fields(v), " "))
	}
	sum := sha256.Sum256(body)
	payload := hex.EncodeToString(sum[:])
	if h := r.Header.Get("X-Amz-Content-Sha256"); h == "UNSIGNED-PAYLOAD" && service == "ebs" {
		payload = h
	} else if h != "" && h != payload {
		return fail("X-Amz-Content-Sha256 is not the hash of the body")
	}
	canonicalRequest := strings.Join([]string{r.Method, canonicalPath(r.URL), canonicalQuery(r.URL.Query()),
		canon.String(), parts["SignedHeaders"], payload}, "\n")
	crHash := sha256.Sum256([]byte(canonicalRequest))
	stringToSign := strings.Join([]string{algorithm, date, strings.Join(scope[1:], "/"), hex.EncodeToString(crHash[:])}, "\n")
	key := []byte("AWS4" + tw.opts.SecretAccessKey)
	for _, s := range append(scope[1:4], "aws4_request") {
		key = hmacSHA256(key, s)
	}
	if want := hex.EncodeToString(hmacSHA256(key, stringToSign)); !hmac.Equal([]byte(want), []byte(parts["Signature"])) {
		return fail("the signature does not match")
	}
	return scope[2], nil
}

func hmacSHA256(key []byte, s string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(s))
	return m.Sum(nil)
}

func canonicalPath(u *url.URL) string {
	if p := u.EscapedPath(); p != "" {
		return p
	}
	return "/"
}

func canonicalQuery(q url.Values) string {
	keys := make([]string, 0, len(q))
	for k := range q {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var out []string
	for _, k := range keys {
		for _, v := range q[k] {
			out = append(out, uriEncode(k)+"="+uriEncode(v))
		}
	}
	return strings.Join(out, "&")
}

func uriEncode(s string) string {
	return strings.ReplaceAll(url.QueryEscape(s), "+", "%20")
}
