// Package route53 writes a fleet's spec.global as the Amazon Route 53 records that do the same
// job: a change batch for `aws route53 change-resource-record-sets`, the health checks its records
// refer to, and, for geo, the CIDR collection. So the routing a fleet declares for herd's DNS can
// be carried to AWS as it is.
//
// Identifiers AWS assigns on creation (health check ids, the CIDR collection id, the hosted
// zone id of alias targets) are written as placeholders, ${HealthCheckId:<caller reference>},
// ${CidrCollectionId} and ${HostedZoneId}, to be replaced after creating those objects.
package route53

import (
	"fmt"
	"net/netip"
	"slices"

	"herd.dev/herd/api/v1alpha1"
)

// Route 53 health checks as fast as Route 53 allows: every 10 s, out after 3 failures.
const (
	healthCheckInterval  = 10
	healthCheckThreshold = 3
)

// Export is the output of `herd dns export`.
type Export struct {
	Comment        string          `json:"Comment"`
	HealthChecks   []HealthCheck   `json:"HealthChecks"`
	CidrCollection *CidrCollection `json:"CidrCollection,omitempty"`
	ChangeBatch    ChangeBatch     `json:"ChangeBatch"`
}

// HealthCheck is the input of `aws route53 create-health-check`.
type HealthCheck struct {
	CallerReference   string            `json:"CallerReference"`
	HealthCheckConfig HealthCheckConfig `json:"HealthCheckConfig"`
}

// HealthCheckConfig is Route 53's HealthCheckConfig.
type HealthCheckConfig struct {
	IPAddress        string `json:"IPAddress"`
	Port             int32  `json:"Port"`
	Type             string `json:"Type"`
	ResourcePath     string `json:"ResourcePath,omitempty"`
	RequestInterval  int    `json:"RequestInterval"`
	FailureThreshold int    `json:"FailureThreshold"`
}

// CidrCollection is the input of `aws route53 create-cidr-collection` and
// `change-cidr-collection`.
type CidrCollection struct {
	Name      string         `json:"Name"`
	Locations []CidrLocation `json:"Locations"`
}

// CidrLocation is one location of a CIDR collection.
type CidrLocation struct {
	LocationName string   `json:"LocationName"`
	CidrList     []string `json:"CidrList"`
}

// ChangeBatch is Route 53's ChangeBatch.
type ChangeBatch struct {
	Comment string   `json:"Comment"`
	Changes []Change `json:"Changes"`
}

// Change is one UPSERT.
type Change struct {
	Action            string            `json:"Action"`
	ResourceRecordSet ResourceRecordSet `json:"ResourceRecordSet"`
}

// ResourceRecordSet is Route 53's ResourceRecordSet, with the fields herd's policies use.
type ResourceRecordSet struct {
	Name              string             `json:"Name"`
	Type              string             `json:"Type"`
	SetIdentifier     string             `json:"SetIdentifier"`
	Failover          string             `json:"Failover,omitempty"`
	Weight            *int32             `json:"Weight,omitempty"`
	Region            string             `json:"Region,omitempty"`
	CidrRoutingConfig *CidrRoutingConfig `json:"CidrRoutingConfig,omitempty"`
	TTL               uint32             `json:"TTL,omitempty"`
	ResourceRecords   []ResourceRecord   `json:"ResourceRecords,omitempty"`
	AliasTarget       *AliasTarget       `json:"AliasTarget,omitempty"`
	HealthCheckID     string             `json:"HealthCheckId,omitempty"`
}

// CidrRoutingConfig sends a CIDR collection's location to the record.
type CidrRoutingConfig struct {
	CollectionID string `json:"CollectionId"`
	LocationName string `json:"LocationName"`
}

// ResourceRecord is one value.
type ResourceRecord struct {
	Value string `json:"Value"`
}

// AliasTarget points a record at another record set of the zone.
type AliasTarget struct {
	HostedZoneID         string `json:"HostedZoneId"`
	DNSName              string `json:"DNSName"`
	EvaluateTargetHealth bool   `json:"EvaluateTargetHealth"`
}

// Options complete what a fleet's spec does not say.
type Options struct {
	// Addresses are each region's load balancer data addresses (from GET /v1/routes).
	Addresses map[string][]netip.Addr
	// AWSRegions maps herd regions to AWS regions for latency records. Default: the herd name.
	AWSRegions map[string]string
}

// FromFleet returns the Route 53 objects equivalent to f's spec.global (f defaulted, as stored).
func FromFleet(f *v1alpha1.Fleet, opts Options) (*Export, error) {
	g := f.Spec.Global
	if g == nil {
		return nil, fmt.Errorf("fleet %s has no spec.global: give it a hostname and a policy to export its DNS records", f.Metadata.Name)
	}
	name := g.Hostname + "."
	order := g.FailoverOrder
	for _, r := range f.Spec.Regions {
		if !slices.Contains(order, r.Name) {
			order = append(order, r.Name)
		}
	}
	ttl := uint32(v1alpha1.DefaultGlobalTTL.Seconds())
	if g.TTL != nil {
		ttl = uint32(g.TTL.Seconds())
	}
	out := &Export{
		Comment:     fmt.Sprintf("herd fleet %s: %s, policy %s. Create the health checks (and CIDR collection) first, then replace the ${...} placeholders with the ids AWS returned.", f.Metadata.Name, g.Hostname, g.Policy),
		ChangeBatch: ChangeBatch{Comment: fmt.Sprintf("herd dns export %s", f.Metadata.Name)},
	}
	port, path, typ := int32(80), f.Spec.HealthCheck.Path, "HTTP"
	if len(f.Spec.Listeners) > 0 {
		port = f.Spec.Listeners[0].Port
		if f.Spec.Listeners[0].Protocol == v1alpha1.ProtocolTCP {
			typ, path = "TCP", ""
		}
	}
	check := map[string]string{}
	for _, region := range order {
		addrs := opts.Addresses[region]
		if len(addrs) == 0 {
			return nil, fmt.Errorf("region %s of fleet %s has no load balancer address yet: export once its regional load balancer runs (herd get routes)", region, f.Metadata.Name)
		}
		ref := fmt.Sprintf("herd-%s-%s", f.Metadata.Name, region)
		out.HealthChecks = append(out.HealthChecks, HealthCheck{CallerReference: ref, HealthCheckConfig: HealthCheckConfig{
			IPAddress: addrs[0].String(), Port: port, Type: typ, ResourcePath: path,
			RequestInterval: healthCheckInterval, FailureThreshold: healthCheckThreshold,
		}})
		check[region] = "${HealthCheckId:" + ref + "}"
	}

	// records adds the A and AAAA record sets of region with the routing fields set by fill.
	records := func(owner, region string, fill func(*ResourceRecordSet)) {
		for _, typ := range []string{"A", "AAAA"} {
			rs := ResourceRecordSet{Name: owner, Type: typ, SetIdentifier: region, TTL: ttl, HealthCheckID: check[region]}
			for _, a := range opts.Addresses[region] {
				if (typ == "A") == a.Unmap().Is4() {
					rs.ResourceRecords = append(rs.ResourceRecords, ResourceRecord{Value: a.Unmap().String()})
				}
			}
			if len(rs.ResourceRecords) == 0 {
				continue
			}
			fill(&rs)
			out.ChangeBatch.Changes = append(out.ChangeBatch.Changes, Change{Action: "UPSERT", ResourceRecordSet: rs})
		}
	}
	switch g.Policy {
	case v1alpha1.PolicyFailover:
		has := func(region, typ string) bool {
			return slices.ContainsFunc(opts.Addresses[region], func(a netip.Addr) bool { return (typ == "A") == a.Unmap().Is4() })
		}
		failoverChain(out, name, order, records, has)
	case v1alpha1.PolicyWeighted:
		for _, region := range order {
			w := weightOf(g, region)
			records(name, region, func(rs *ResourceRecordSet) { rs.Weight = &w })
		}
	case v1alpha1.PolicyLatency:
		for _, region := range order {
			aws := region
			if m, ok := opts.AWSRegions[region]; ok {
				aws = m
			}
			records(name, region, func(rs *ResourceRecordSet) { rs.Region = aws })
		}
	case v1alpha1.PolicyGeo:
		geoRecords(out, f, name, order, records)
	default:
		return nil, fmt.Errorf("spec.global.policy %q has no Route 53 equivalent", g.Policy)
	}
	return out, nil
}

// failoverChain writes failover over any number of regions: Route 53's failover records have only
// PRIMARY and SECONDARY, so each SECONDARY but the last is an alias to the next pair, one label
// down ("failover-1.<hostname>"), evaluating that pair's health.
func failoverChain(out *Export, name string, order []string, records func(string, string, func(*ResourceRecordSet)), has func(region, typ string) bool) {
	owner := name
	for i, region := range order {
		last := i == len(order)-1
		role := "PRIMARY"
		if last && i > 0 {
			role = "SECONDARY"
		}
		records(owner, region, func(rs *ResourceRecordSet) { rs.Failover = role })
		if last || i == len(order)-2 {
			continue
		}
		next := fmt.Sprintf("failover-%d.%s", i+1, name)
		for _, typ := range []string{"A", "AAAA"} {
			if !slices.ContainsFunc(order[i+1:], func(r string) bool { return has(r, typ) }) {
				continue // no later region has this type: no record set to alias
			}
			out.ChangeBatch.Changes = append(out.ChangeBatch.Changes, Change{Action: "UPSERT", ResourceRecordSet: ResourceRecordSet{
				Name: owner, Type: typ, SetIdentifier: "next-" + order[i+1], Failover: "SECONDARY",
				AliasTarget: &AliasTarget{HostedZoneID: "${HostedZoneId}", DNSName: next, EvaluateTargetHealth: true},
			}})
		}
		owner = next
	}
}

// geoRecords writes geo as Route 53 CIDR routing: a CIDR collection with a location per region,
// and the default region as location "*".
func geoRecords(out *Export, f *v1alpha1.Fleet, name string, order []string, records func(string, string, func(*ResourceRecordSet))) {
	g := f.Spec.Global
	col := &CidrCollection{Name: "herd-" + f.Metadata.Name}
	for _, region := range order {
		var cidrs []string
		if g.Geo != nil {
			for cidr, r := range g.Geo.CIDRs {
				if r == region {
					cidrs = append(cidrs, cidr)
				}
			}
		}
		slices.Sort(cidrs)
		if len(cidrs) > 0 {
			col.Locations = append(col.Locations, CidrLocation{LocationName: region, CidrList: cidrs})
			records(name, region, func(rs *ResourceRecordSet) {
				rs.CidrRoutingConfig = &CidrRoutingConfig{CollectionID: "${CidrCollectionId}", LocationName: region}
			})
		}
	}
	def := order[0]
	if g.Geo != nil && g.Geo.Default != "" {
		def = g.Geo.Default
	}
	records(name, def, func(rs *ResourceRecordSet) {
		rs.SetIdentifier = "default-" + def
		rs.CidrRoutingConfig = &CidrRoutingConfig{CollectionID: "${CidrCollectionId}", LocationName: "*"}
	})
	out.CidrCollection = col
}

func weightOf(g *v1alpha1.Global, region string) int32 {
	if w, ok := g.Weights[region]; ok {
		return w
	}
	return 1
}
