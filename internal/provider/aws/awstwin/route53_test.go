package awstwin_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/route53"
	"github.com/aws/aws-sdk-go-v2/service/route53/types"

	"herd.dev/herd/internal/provider/aws/awstwin"
)

func weighted(name, id string, weight int64, value string) types.Change {
	return types.Change{Action: types.ChangeActionUpsert, ResourceRecordSet: &types.ResourceRecordSet{
		Name: aws.String(name), Type: types.RRTypeA, SetIdentifier: aws.String(id), Weight: aws.Int64(weight),
		TTL: aws.Int64(5), ResourceRecords: []types.ResourceRecord{{Value: aws.String(value)}},
	}}
}

func change(t *testing.T, c *route53.Client, zone string, changes ...types.Change) (*route53.ChangeResourceRecordSetsOutput, error) {
	t.Helper()
	return c.ChangeResourceRecordSets(context.Background(), &route53.ChangeResourceRecordSetsInput{
		HostedZoneId: aws.String(zone), ChangeBatch: &types.ChangeBatch{Changes: changes},
	})
}

// Route 53 through the SDK: a batch is applied whole or refused with every reason, a DELETE
// must name the set as it is, a simple set cannot sit beside weighted ones, listing pages in
// Route 53's order, a change is PENDING then INSYNC, and PriorRequestNotComplete is retried by
// the SDK's own retryer.
func TestRoute53ThroughTheSDK(t *testing.T) {
	tw := awstwin.New(t, awstwin.Options{})
	zone := tw.AddHostedZone("herd.test")
	c := tw.Route53Client()
	ctx := context.Background()

	out, err := change(t, c, zone, weighted("hello.herd.test", "eu", 3, "10.0.0.1"), weighted("hello.herd.test.", "us", 1, "10.0.0.2"))
	if err != nil {
		t.Fatal(err)
	}
	if out.ChangeInfo.Status != types.ChangeStatusPending {
		t.Errorf("a new change is %s, want PENDING", out.ChangeInfo.Status)
	}
	got, err := c.GetChange(ctx, &route53.GetChangeInput{Id: out.ChangeInfo.Id})
	if err != nil || got.ChangeInfo.Status != types.ChangeStatusInsync {
		t.Errorf("GetChange without delay: %+v, %v; want INSYNC", got, err)
	}

	// A simple set beside weighted ones, and a DELETE with other values: both reasons, nothing applied.
	_, err = change(t, c, zone,
		types.Change{Action: types.ChangeActionCreate, ResourceRecordSet: &types.ResourceRecordSet{
			Name: aws.String("hello.herd.test."), Type: types.RRTypeA, TTL: aws.Int64(5), ResourceRecords: []types.ResourceRecord{{Value: aws.String("10.0.0.9")}},
		}},
		types.Change{Action: types.ChangeActionDelete, ResourceRecordSet: weighted("hello.herd.test.", "us", 1, "10.0.0.3").ResourceRecordSet},
		weighted("other.herd.test.", "eu", 1, "10.0.0.4"),
	)
	var icb *types.InvalidChangeBatch
	if !errors.As(err, &icb) || !strings.Contains(err.Error(), "conflicting RRSet of type A") || !strings.Contains(err.Error(), "do not match the current values") {
		t.Fatalf("conflicting batch: %v, want InvalidChangeBatch naming both", err)
	}
	if n := len(tw.RecordSets(zone)); n != 4 {
		t.Errorf("a refused batch left %d record sets, want the 4 before it", n)
	}
	if _, err := change(t, c, zone, weighted("hello.other.", "eu", 1, "10.0.0.1")); err == nil || !strings.Contains(err.Error(), "not permitted in zone herd.test.") {
		t.Errorf("a name outside the zone: %v", err)
	}
	if _, err := change(t, c, zone, types.Change{Action: types.ChangeActionCreate, ResourceRecordSet: &types.ResourceRecordSet{
		Name: aws.String("t.herd.test."), Type: types.RRTypeTxt, TTL: aws.Int64(5), ResourceRecords: []types.ResourceRecord{{Value: aws.String("unquoted")}},
	}}); err == nil || !strings.Contains(err.Error(), "quotation marks") {
		t.Errorf("an unquoted TXT value: %v", err)
	}

	// Paging, in Route 53's order: the apex (NS, SOA), then hello's sets by identifier.
	var names []string
	p := route53.NewListResourceRecordSetsPaginator(c, &route53.ListResourceRecordSetsInput{HostedZoneId: aws.String(zone), MaxItems: aws.Int32(1)})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, rs := range page.ResourceRecordSets {
			names = append(names, aws.ToString(rs.Name)+" "+string(rs.Type)+" "+aws.ToString(rs.SetIdentifier))
		}
	}
	if want := "herd.test. NS ,herd.test. SOA ,hello.herd.test. A eu,hello.herd.test. A us"; strings.Join(names, ",") != want {
		t.Errorf("listing by pages of 1: %q, want %q", strings.Join(names, ","), want)
	}

	tw.ChangeDelay(time.Hour)
	tw.PriorRequestNotComplete(2)
	out, err = change(t, c, zone, types.Change{Action: types.ChangeActionDelete, ResourceRecordSet: weighted("hello.herd.test.", "us", 1, "10.0.0.2").ResourceRecordSet})
	if err != nil {
		t.Fatalf("the SDK does not retry PriorRequestNotComplete: %v", err)
	}
	if n := tw.Calls()["ChangeResourceRecordSets"]; n != 7 {
		t.Errorf("%d ChangeResourceRecordSets calls, want 7 (4, then 2 refused and retried)", n)
	}
	got, err = c.GetChange(ctx, &route53.GetChangeInput{Id: out.ChangeInfo.Id})
	if err != nil || got.ChangeInfo.Status != types.ChangeStatusPending {
		t.Errorf("GetChange within the delay: %+v, %v; want PENDING", got, err)
	}
	if _, err := c.ListResourceRecordSets(ctx, &route53.ListResourceRecordSetsInput{HostedZoneId: aws.String("ZNONE")}); err == nil || !strings.Contains(err.Error(), "NoSuchHostedZone") {
		t.Errorf("an unknown zone: %v", err)
	}
}

// The AWS CLI changes, lists and follows a change of a hosted zone, and reads what the SDK wrote.
func TestRoute53CLIAgreesWithSDK(t *testing.T) {
	awsCLI(t)
	tw := awstwin.New(t, awstwin.Options{})
	zone := tw.AddHostedZone("herd.test.")
	if _, err := change(t, tw.Route53Client(), zone, weighted("hello.herd.test.", "eu", 3, "10.0.0.1")); err != nil {
		t.Fatal(err)
	}
	batch := filepath.Join(t.TempDir(), "batch.json")
	if err := os.WriteFile(batch, []byte(`{"Changes": [{"Action": "CREATE", "ResourceRecordSet": {
		"Name": "hello.herd.test.", "Type": "A", "SetIdentifier": "us", "Weight": 1, "TTL": 5,
		"ResourceRecords": [{"Value": "10.0.0.2"}]}}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	var changed struct{ ChangeInfo struct{ ID, Status string } }
	cliService(t, tw, &changed, "route53", "change-resource-record-sets", "--hosted-zone-id", zone, "--change-batch", "file://"+batch)
	if changed.ChangeInfo.Status != "PENDING" || !strings.HasPrefix(changed.ChangeInfo.ID, "/change/") {
		t.Fatalf("CLI change-resource-record-sets: %+v", changed)
	}
	var status struct{ ChangeInfo struct{ Status string } }
	cliService(t, tw, &status, "route53", "get-change", "--id", changed.ChangeInfo.ID)
	if status.ChangeInfo.Status != "INSYNC" {
		t.Errorf("CLI get-change: %+v, want INSYNC", status)
	}
	var list struct {
		ResourceRecordSets []struct {
			Name, Type, SetIdentifier string
			Weight                    int64
			TTL                       int64
			ResourceRecords           []struct{ Value string }
		}
	}
	cliService(t, tw, &list, "route53", "list-resource-record-sets", "--hosted-zone-id", zone, "--max-items", "10", "--page-size", "1")
	var got []string
	for _, rs := range list.ResourceRecordSets {
		if rs.Type == "A" {
			got = append(got, rs.Name+" "+rs.SetIdentifier+" "+rs.ResourceRecords[0].Value)
			if rs.TTL != 5 || rs.Weight == 0 {
				t.Errorf("CLI reads %+v, want TTL 5 and a weight", rs)
			}
		}
	}
	if want := "hello.herd.test. eu 10.0.0.1,hello.herd.test. us 10.0.0.2"; strings.Join(got, ",") != want {
		t.Errorf("CLI list-resource-record-sets, a page of 1 at a time: %q, want %q", strings.Join(got, ","), want)
	}
	sdk, err := tw.Route53Client().ListResourceRecordSets(context.Background(), &route53.ListResourceRecordSetsInput{HostedZoneId: aws.String(zone)})
	if err != nil || len(sdk.ResourceRecordSets) != len(list.ResourceRecordSets) {
		t.Errorf("the SDK lists %d sets (%v), the CLI %d", len(sdk.ResourceRecordSets), err, len(list.ResourceRecordSets))
	}
}
