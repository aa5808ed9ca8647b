package awstwin

// Route 53's REST-XML API: ChangeResourceRecordSets, ListResourceRecordSets and GetChange on
// hosted zones the test adds (AddHostedZone), with Route 53's validation of a change batch
// (applied whole or not at all), its listing order and paging, changes PENDING then INSYNC, and
// the refusals its users meet: PriorRequestNotComplete and Throttling.

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/route53"
)

// route53Prefix starts the path of every Route 53 call (its API version).
const route53Prefix = "/2013-04-01/"

// route53State is the twin's Route 53: hosted zones and the changes made to them.
type route53State struct {
	zones   map[string]*hostedZone // by ID
	changes map[string]time.Time   // submission time by change ID
	delay   time.Duration          // a change is PENDING this long, then INSYNC
	prior   int                    // next changes refused with PriorRequestNotComplete
}

type hostedZone struct {
	id, name string
	sets     []RecordSet // in Route 53's listing order
}

// AddHostedZone creates a public hosted zone for name (with its SOA and NS record sets, as
// Route 53 does) and returns its ID.
func (tw *Twin) AddHostedZone(name string) string {
	tw.mu.Lock()
	defer tw.mu.Unlock()
	tw.seq++
	id := fmt.Sprintf("Z%019X", tw.seq)
	name = fqdn(name)
	ttl := int64(900)
	z := &hostedZone{id: id, name: name, sets: []RecordSet{
		{Name: name, Type: "NS", TTL: aws.Int64(172800), Records: []Record{{Value: "ns-1.awsdns-twin.org."}, {Value: "ns-2.awsdns-twin.net."}}},
		{Name: name, Type: "SOA", TTL: &ttl, Records: []Record{{Value: "ns-1.awsdns-twin.org. awsdns-hostmaster.amazon.com. 1 7200 900 1209600 86400"}}},
	}}
	if tw.r53.zones == nil {
		tw.r53.zones, tw.r53.changes = map[string]*hostedZone{}, map[string]time.Time{}
	}
	tw.r53.zones[id] = z
	sortSets(z.sets)
	return id
}

// RecordSets returns copies of a hosted zone's record sets, in Route 53's listing order.
func (tw *Twin) RecordSets(zoneID string) []RecordSet {
	tw.mu.Lock()
	defer tw.mu.Unlock()
	z, ok := tw.r53.zones[zoneID]
	if !ok {
		return nil
	}
	return cloneSets(z.sets)
}

// PriorRequestNotComplete refuses the next n ChangeResourceRecordSets with
// PriorRequestNotComplete, as Route 53 does while it still processes a change of the zone.
func (tw *Twin) PriorRequestNotComplete(n int) {
	tw.mu.Lock()
	defer tw.mu.Unlock()
	tw.r53.prior = n
}

// ChangeDelay keeps each Route 53 change PENDING for d before GetChange says INSYNC.
func (tw *Twin) ChangeDelay(d time.Duration) {
	tw.mu.Lock()
	defer tw.mu.Unlock()
	tw.r53.delay = d
}

// Route53Client is a Route 53 client of the SDK that reaches the twin, signing with its
// credentials.
func (tw *Twin) Route53Client(optFns ...func(*route53.Options)) *route53.Client {
	return route53.New(route53.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(tw.URL),
		Credentials:  tw.Credentials(),
	}, optFns...)
}

// serveRoute53 answers one Route 53 REST-XML call.
func (tw *Twin) serveRoute53(w http.ResponseWriter, r *http.Request) {
	requestID := newRequestID()
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		writeRoute53Error(w, requestID, errorf(http.StatusBadRequest, "InvalidInput", "read the request: %v", err))
		return
	}
	if _, aerr := tw.authenticate(r, body, "route53"); aerr != nil {
		writeRoute53Error(w, requestID, errorf(http.StatusForbidden, "SignatureDoesNotMatch", "%s", aerr.message))
		return
	}
	answer, aerr := tw.route53Call(r, body)
	if aerr != nil {
		writeRoute53Error(w, requestID, aerr)
		return
	}
	var buf bytes.Buffer
	buf.WriteString(xml.Header)
	if err := xml.NewEncoder(&buf).Encode(answer); err != nil {
		writeRoute53Error(w, requestID, errorf(http.StatusInternalServerError, "InternalFailure", "encode the answer: %v", err))
		return
	}
	w.Header().Set("Content-Type", "text/xml")
	w.Header().Set("x-amzn-RequestId", requestID)
	_, _ = w.Write(buf.Bytes())
}

// route53Call routes a call by its method and path, counts it and applies the faults.
func (tw *Twin) route53Call(r *http.Request, body []byte) (any, *apiError) {
	parts := strings.Split(strings.Trim(strings.TrimPrefix(r.URL.Path, route53Prefix), "/"), "/")
	var action string
	switch {
	case len(parts) == 3 && parts[0] == "hostedzone" && parts[2] == "rrset" && r.Method == http.MethodPost:
		action = "ChangeResourceRecordSets"
	case len(parts) == 3 && parts[0] == "hostedzone" && parts[2] == "rrset" && r.Method == http.MethodGet:
		action = "ListResourceRecordSets"
	case len(parts) == 2 && parts[0] == "change" && r.Method == http.MethodGet:
		action = "GetChange"
	default:
		return nil, errorf(http.StatusBadRequest, "InvalidInput", "the twin does not serve %s %s", r.Method, r.URL.Path)
	}
	tw.mu.Lock()
	defer tw.mu.Unlock()
	tw.calls[action]++
	if tw.faults.throttle > 0 {
		tw.faults.throttle--
		tw.faults.throttled++
		return nil, errorf(http.StatusBadRequest, "Throttling", "Rate exceeded")
	}
	if tw.faults.denied[action] {
		return nil, errorf(http.StatusForbidden, "AccessDenied",
			"User: arn:aws:iam::%s:user/herd is not authorized to perform: route53:%s", OwnerID, action)
	}
	if action == "GetChange" {
		return tw.getChange(parts[1])
	}
	z, ok := tw.r53.zones[parts[1]]
	if !ok {
		return nil, errorf(http.StatusNotFound, "NoSuchHostedZone", "No hosted zone found with ID: %s", parts[1])
	}
	if action == "ListResourceRecordSets" {
		return listSets(z, r)
	}
	if tw.r53.prior > 0 {
		tw.r53.prior--
		return nil, errorf(http.StatusBadRequest, "PriorRequestNotComplete", "The request was rejected because Route 53 was still processing a prior request.")
	}
	var req changeResourceRecordSetsRequest
	if err := xml.Unmarshal(body, &req); err != nil {
		return nil, errorf(http.StatusBadRequest, "InvalidInput", "Invalid XML ; %v", err)
	}
	if aerr := z.apply(req.Changes); aerr != nil {
		return nil, aerr
	}
	tw.seq++
	id := fmt.Sprintf("C%019X", tw.seq)
	now := tw.opts.Now()
	tw.r53.changes[id] = now
	return &changeResourceRecordSetsResponse{Namespace: route53Namespace, ChangeInfo: xmlChangeInfo{
		ID: "/change/" + id, Status: "PENDING", SubmittedAt: isoTime(now), Comment: req.Comment,
	}}, nil
}

func (tw *Twin) getChange(id string) (any, *apiError) {
	submitted, ok := tw.r53.changes[id]
	if !ok {
		return nil, errorf(http.StatusNotFound, "NoSuchChange", "A change with the specified change ID does not exist.")
	}
	status := "PENDING"
	if !tw.opts.Now().Before(submitted.Add(tw.r53.delay)) {
		status = "INSYNC"
	}
	return &getChangeResponse{Namespace: route53Namespace, ChangeInfo: xmlChangeInfo{
		ID: "/change/" + id, Status: status, SubmittedAt: isoTime(submitted),
	}}, nil
}

// listSets answers ListResourceRecordSets: the sets from the start name, type and identifier
// on, MaxItems of them (300 by default), and where the next page starts.
func listSets(z *hostedZone, r *http.Request) (any, *apiError) {
	q := r.URL.Query()
	max := 300
	if v := q.Get("maxitems"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return nil, errorf(http.StatusBadRequest, "InvalidInput", "1 validation error detected: Value '%s' at 'maxItems' failed to satisfy constraint", v)
		}
		max = min(n, 300)
	}
	if q.Get("type") != "" && q.Get("name") == "" {
		return nil, errorf(http.StatusBadRequest, "InvalidInput", "The input is not valid: a type requires a name")
	}
	start := RecordSet{Name: fqdn(q.Get("name")), Type: q.Get("type"), SetIdentifier: q.Get("identifier")}
	i := 0
	if q.Get("name") != "" {
		i, _ = slices.BinarySearchFunc(z.sets, start, compareSets)
	}
	out := &listResourceRecordSetsResponse{Namespace: route53Namespace, MaxItems: max}
	end := min(i+max, len(z.sets))
	out.ResourceRecordSets = cloneSets(z.sets[i:end])
	if end < len(z.sets) {
		next := z.sets[end]
		out.IsTruncated, out.NextRecordName, out.NextRecordType, out.NextRecordIdentifier = true, next.Name, next.Type, next.SetIdentifier
	}
	return out, nil
}

// apply applies a change batch whole, or answers why not with every reason, as Route 53 does.
func (z *hostedZone) apply(changes []xmlChange) *apiError {
	if len(changes) == 0 {
		return errorf(http.StatusBadRequest, "InvalidInput", "1 validation error detected: Value null at 'changeBatch.changes' failed to satisfy constraint: Member must not be null")
	}
	if len(changes) > 1000 {
		return errorf(http.StatusBadRequest, "InvalidChangeBatch", "[Number of records limit of 1000 exceeded.]")
	}
	sets := cloneSets(z.sets)
	var msgs []string
	for _, c := range changes {
		rs := c.ResourceRecordSet
		rs.Name, rs.Type = fqdn(rs.Name), strings.ToUpper(rs.Type)
		if aerr := z.check(c.Action, &rs); aerr != nil {
			return aerr
		}
		desc := describeSet(rs)
		i := slices.IndexFunc(sets, func(s RecordSet) bool { return compareSets(s, rs) == 0 })
		switch c.Action {
		case "CREATE":
			if i >= 0 {
				msgs = append(msgs, fmt.Sprintf("Tried to create resource record set %s but it already exists", desc))
				continue
			}
			sets = append(sets, rs)
		case "DELETE":
			switch {
			case i < 0:
				msgs = append(msgs, fmt.Sprintf("Tried to delete resource record set %s but it was not found", desc))
			case !sameSet(sets[i], rs):
				msgs = append(msgs, fmt.Sprintf("Tried to delete resource record set %s but the values provided do not match the current values", desc))
			default:
				sets = slices.Delete(sets, i, i+1)
			}
		case "UPSERT":
			if i >= 0 {
				sets[i] = rs
			} else {
				sets = append(sets, rs)
			}
		}
	}
	msgs = append(msgs, z.conflicts(sets)...)
	if len(msgs) > 0 {
		return errorf(http.StatusBadRequest, "InvalidChangeBatch", "[%s]", strings.Join(msgs, ", "))
	}
	sortSets(sets)
	z.sets = sets
	return nil
}

// check validates one change on its own, the way Route 53's input validation does.
func (z *hostedZone) check(action string, rs *RecordSet) *apiError {
	desc := fmt.Sprintf("Change with [Action=%s, Name=%s, Type=%s, SetIdentifier=%s]", action, rs.Name, rs.Type, rs.SetIdentifier)
	invalid := func(format string, args ...any) *apiError {
		return errorf(http.StatusBadRequest, "InvalidInput", "Invalid request: "+format+" in "+desc, args...)
	}
	if !slices.Contains([]string{"CREATE", "DELETE", "UPSERT"}, action) {
		return invalid("Unknown action '%s'", action)
	}
	if rs.Name != z.name && !strings.HasSuffix(rs.Name, "."+z.name) {
		return errorf(http.StatusBadRequest, "InvalidChangeBatch", "[RRSet with DNS name %s is not permitted in zone %s]", rs.Name, z.name)
	}
	if !slices.Contains([]string{"A", "AAAA", "CAA", "CNAME", "DS", "MX", "NAPTR", "NS", "PTR", "SOA", "SPF", "SRV", "TXT"}, rs.Type) {
		return invalid("Unknown type '%s'", rs.Type)
	}
	policies := 0
	for _, set := range []bool{rs.Weight != nil, rs.Region != "", rs.Failover != "", rs.MultiValueAnswer != nil} {
		if set {
			policies++
		}
	}
	switch {
	case rs.SetIdentifier != "" && policies != 1:
		return invalid("Expected exactly one of [Weight, Region, Failover, GeoLocation, MultiValueAnswer, CidrRoutingConfig], but found %d", policies)
	case rs.SetIdentifier == "" && policies > 0:
		return invalid("Missing field 'SetIdentifier'")
	case rs.Weight != nil && (*rs.Weight < 0 || *rs.Weight > 255):
		return invalid("Weight %d is not between 0 and 255", *rs.Weight)
	case rs.AliasTarget != nil && (rs.TTL != nil || len(rs.Records) > 0):
		return invalid("An alias record set has no TTL and no ResourceRecords")
	case rs.AliasTarget == nil && (rs.TTL == nil || len(rs.Records) == 0):
		return invalid("Missing field 'TTL' or 'ResourceRecords'")
	}
	for _, v := range rs.Records {
		if msg := checkValue(rs.Type, v.Value); msg != "" {
			return errorf(http.StatusBadRequest, "InvalidChangeBatch", "[Invalid Resource Record: 'FATAL problem: %s encountered with '%s'']", msg, v.Value)
		}
	}
	return nil
}

// checkValue is Route 53's check of the values herd writes: addresses of the family and TXT
// strings in quotation marks.
func checkValue(typ, v string) string {
	switch typ {
	case "A":
		if a, err := netip.ParseAddr(v); err != nil || !a.Is4() {
			return "ARRDATAIllegalIPv4Address (Value is not a valid IPv4 address)"
		}
	case "AAAA":
		if a, err := netip.ParseAddr(v); err != nil || !a.Is6() || a.Is4In6() {
			return "AAAARRDATAIllegalIPv6Address (Value is not a valid IPv6 address)"
		}
	case "TXT", "SPF":
		if len(v) < 2 || v[0] != '"' || v[len(v)-1] != '"' {
			return "InvalidCharacterString (Value should be enclosed in quotation marks)"
		}
	}
	return ""
}

// conflicts are what Route 53 refuses of a zone's sets as a whole: a simple set beside sets of a
// routing policy (or of two policies) of one name and type, and a CNAME beside other types.
func (z *hostedZone) conflicts(sets []RecordSet) []string {
	var msgs []string
	policyOf := map[[2]string]string{}
	types := map[string][]string{}
	for _, s := range sets {
		key := [2]string{s.Name, s.Type}
		p := policy(s)
		if prev, ok := policyOf[key]; ok && (prev != p || p == "simple") {
			msgs = append(msgs, fmt.Sprintf("RRSet of type %s with DNS name %s is not permitted because a conflicting RRSet of type %s with the same DNS name already exists.", s.Type, s.Name, s.Type))
		}
		policyOf[key] = p
		if !slices.Contains(types[s.Name], s.Type) {
			types[s.Name] = append(types[s.Name], s.Type)
		}
	}
	for name, ts := range types {
		if slices.Contains(ts, "CNAME") && len(ts) > 1 {
			msgs = append(msgs, fmt.Sprintf("RRSet of type CNAME with DNS name %s is not permitted as it conflicts with other records with the same DNS name in zone %s", name, z.name))
		}
	}
	slices.Sort(msgs)
	return slices.Compact(msgs)
}

func policy(s RecordSet) string {
	switch {
	case s.Weight != nil:
		return "weighted"
	case s.Region != "":
		return "latency"
	case s.Failover != "":
		return "failover"
	case s.MultiValueAnswer != nil:
		return "multivalue"
	}
	return "simple"
}

func describeSet(rs RecordSet) string {
	if rs.SetIdentifier != "" {
		return fmt.Sprintf("[name='%s', type='%s', set-identifier='%s']", rs.Name, rs.Type, rs.SetIdentifier)
	}
	return fmt.Sprintf("[name='%s', type='%s']", rs.Name, rs.Type)
}

// sameSet reports whether a DELETE names the set as it is, which Route 53 requires.
func sameSet(a, b RecordSet) bool {
	ea, _ := xml.Marshal(a)
	eb, _ := xml.Marshal(b)
	return bytes.Equal(ea, eb)
}

// compareSets is Route 53's listing order: by name with its labels reversed
// (com.example.www), then type, then set identifier.
func compareSets(a, b RecordSet) int {
	if c := strings.Compare(reversedName(a.Name), reversedName(b.Name)); c != 0 {
		return c
	}
	if c := strings.Compare(a.Type, b.Type); c != 0 {
		return c
	}
	return strings.Compare(a.SetIdentifier, b.SetIdentifier)
}

func reversedName(name string) string {
	labels := strings.Split(strings.TrimSuffix(name, "."), ".")
	slices.Reverse(labels)
	return strings.Join(labels, ".")
}

func sortSets(sets []RecordSet) { slices.SortFunc(sets, compareSets) }

func cloneSets(sets []RecordSet) []RecordSet {
	out := make([]RecordSet, len(sets))
	for i, s := range sets {
		out[i] = s
		out[i].Records = slices.Clone(s.Records)
	}
	return out
}

// fqdn is a name as Route 53 keeps it: lower case, with the trailing dot.
func fqdn(name string) string {
	name = strings.ToLower(name)
	if !strings.HasSuffix(name, ".") {
		name += "."
	}
	return name
}

func writeRoute53Error(w http.ResponseWriter, requestID string, e *apiError) {
	typ := "Sender"
	if e.status >= 500 {
		typ = "Receiver"
	}
	w.Header().Set("Content-Type", "text/xml")
	w.Header().Set("x-amzn-RequestId", requestID)
	w.WriteHeader(e.status)
	out, _ := xml.Marshal(route53Error{Namespace: route53Namespace, Type: typ, Code: e.code, Message: e.message, RequestID: requestID})
	_, _ = w.Write(append([]byte(xml.Header), out...))
}
