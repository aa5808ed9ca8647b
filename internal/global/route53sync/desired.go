package route53sync

import (
	"fmt"
	"slices"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/route53/types"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/global/routes"
)

// ownerPrefix names the TXT record set that marks a hostname as herd's: "_herd.<hostname>", so
// that it never meets a TXT record of the hostname's own (a domain verification, SPF).
const ownerPrefix = "_herd."

// desired is what herd keeps at one hostname: its A and AAAA sets and its owner record.
type desired struct {
	fleet string
	sets  []types.ResourceRecordSet // A and AAAA, sorted by key
}

// setsFor writes a route as Route 53 record sets with herd's verdicts already applied: only the
// regions herd's DNS may answer with (the healthy ones, or all of them when none is: fail open)
// have sets, so that a region herd withdraws leaves the zone, and Route 53 needs no health check
// of its own. failover is a simple set of the first of them; weighted and latency are a set per
// region, which Route 53 picks among by weight or by its latency tables.
func setsFor(r routes.Route, awsRegions map[string]string) ([]types.ResourceRecordSet, error) {
	idx, _ := r.Eligible()
	if r.Policy == v1alpha1.PolicyGeo {
		return nil, fmt.Errorf("policy geo has no Route 53 equivalent that herd keeps (Route 53's CIDR routing needs a CIDR collection): use herd's DNS, or herd dns export")
	}
	if r.Policy == v1alpha1.PolicyFailover && len(idx) > 1 {
		idx = idx[:1]
	}
	name := fqdn(r.Hostname)
	var out []types.ResourceRecordSet
	for _, i := range idx {
		rg := r.Regions[i]
		for _, typ := range []types.RRType{types.RRTypeA, types.RRTypeAaaa} {
			rs := types.ResourceRecordSet{Name: aws.String(name), Type: typ, TTL: aws.Int64(int64(r.TTLSeconds))}
			for _, a := range rg.Addresses {
				if (typ == types.RRTypeA) == a.Unmap().Is4() {
					rs.ResourceRecords = append(rs.ResourceRecords, types.ResourceRecord{Value: aws.String(a.Unmap().String())})
				}
			}
			if len(rs.ResourceRecords) == 0 {
				continue
			}
			switch r.Policy {
			case v1alpha1.PolicyWeighted:
				rs.SetIdentifier, rs.Weight = aws.String(rg.Name), aws.Int64(route53Weight(r, rg.Weight))
			case v1alpha1.PolicyLatency:
				region := rg.Name
				if m, ok := awsRegions[rg.Name]; ok {
					region = m
				}
				rs.SetIdentifier, rs.Region = aws.String(rg.Name), types.ResourceRecordSetRegion(region)
			}
			out = append(out, rs)
		}
	}
	slices.SortFunc(out, func(a, b types.ResourceRecordSet) int { return strings.Compare(setKey(a), setKey(b)) })
	return out, nil
}

// route53Weight scales herd's weights (0 to 1000) into Route 53's (0 to 255) when a region of
// the route weighs more than 255, keeping their proportions and a weight above 0 above 0.
func route53Weight(r routes.Route, w int32) int64 {
	top := int32(255)
	for _, rg := range r.Regions {
		top = max(top, rg.Weight)
	}
	if top == 255 || w == 0 {
		return int64(w)
	}
	return max(1, (int64(w)*255+int64(top)/2)/int64(top))
}

// ownerSet is the TXT record set that says installation's herd keeps hostname name for fleet,
// as external-dns marks what it owns.
func ownerSet(name, installation, fleet string) types.ResourceRecordSet {
	return types.ResourceRecordSet{
		Name: aws.String(ownerPrefix + name), Type: types.RRTypeTxt, TTL: aws.Int64(300),
		ResourceRecords: []types.ResourceRecord{{Value: aws.String(fmt.Sprintf(`"heritage=herd,herd/installation=%s,herd/fleet=%s"`, installation, fleet))}},
	}
}

// ownerOf reads the installation an owner record names; "" if it is not one.
func ownerOf(rs types.ResourceRecordSet) string {
	for _, rr := range rs.ResourceRecords {
		v := strings.Trim(aws.ToString(rr.Value), `"`)
		if !strings.HasPrefix(v, "heritage=herd,") {
			continue
		}
		for _, kv := range strings.Split(v, ",") {
			if id, ok := strings.CutPrefix(kv, "herd/installation="); ok {
				return id
			}
		}
	}
	return ""
}

// setKey identifies a record set in its zone: name, type and set identifier.
func setKey(rs types.ResourceRecordSet) string {
	return aws.ToString(rs.Name) + " " + string(rs.Type) + " " + aws.ToString(rs.SetIdentifier)
}

// sameSet reports whether two record sets say the same, values in any order.
func sameSet(a, b types.ResourceRecordSet) bool {
	values := func(rs types.ResourceRecordSet) []string {
		var v []string
		for _, rr := range rs.ResourceRecords {
			v = append(v, aws.ToString(rr.Value))
		}
		slices.Sort(v)
		return v
	}
	return setKey(a) == setKey(b) && aws.ToInt64(a.TTL) == aws.ToInt64(b.TTL) &&
		aws.ToInt64(a.Weight) == aws.ToInt64(b.Weight) && (a.Weight == nil) == (b.Weight == nil) &&
		a.Region == b.Region && a.Failover == b.Failover && a.AliasTarget == nil && b.AliasTarget == nil &&
		aws.ToString(a.HealthCheckId) == aws.ToString(b.HealthCheckId) && slices.Equal(values(a), values(b))
}

// fqdn is a name as Route 53 lists it: lower case, with the trailing dot.
func fqdn(name string) string {
	name = strings.ToLower(name)
	if !strings.HasSuffix(name, ".") {
		name += "."
	}
	return name
}

// inZone reports whether name (fqdn) is zone's apex or below it.
func inZone(name, zone string) bool {
	return name == zone || strings.HasSuffix(name, "."+zone)
}
