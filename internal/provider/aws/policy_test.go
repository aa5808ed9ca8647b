package aws_test

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"herd.dev/herd/internal/provider/aws"
)

// policyActions reads the IAM policy of docs/aws.md (its first JSON block) and returns the
// actions it allows, with their service prefix ("ec2:RunInstances").
func policyActions(t *testing.T) map[string]bool {
	t.Helper()
	doc, err := os.ReadFile("../../../docs/aws.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(doc), "```json\n")
	block, _, ok2 := strings.Cut(rest, "```")
	if !ok || !ok2 {
		t.Fatal("docs/aws.md has no ```json block holding the IAM policy")
	}
	var policy struct {
		Statement []struct {
			Effect string
			Action []string
		}
	}
	if err := json.Unmarshal([]byte(block), &policy); err != nil {
		t.Fatalf("docs/aws.md's IAM policy is not JSON: %v", err)
	}
	actions := map[string]bool{}
	for _, s := range policy.Statement {
		for _, a := range s.Action {
			if a == "iam:PassRole" {
				continue // RunInstances with an instance profile passes its role to EC2
			}
			if s.Effect != "Allow" || !strings.HasPrefix(a, "ec2:") && !strings.HasPrefix(a, "elasticloadbalancing:") {
				t.Errorf("docs/aws.md's policy: %s %s is not an EC2 or ELB action allowed", s.Effect, a)
			}
			actions[a] = true
		}
	}
	return actions
}

// The least-privilege policy of docs/aws.md allows exactly the EC2 and ELB actions the
// provider's code can call: every method of the interfaces through which it reaches them, and
// nothing more.
func TestPolicyMatchesTheCode(t *testing.T) {
	allowed := policyActions(t)
	code := map[string]bool{}
	for _, a := range aws.EC2Actions() {
		code["ec2:"+a] = true
	}
	for _, a := range aws.ELBActions() {
		code["elasticloadbalancing:"+a] = true
	}
	for a := range code {
		if !allowed[a] {
			t.Errorf("the provider calls %s; docs/aws.md's policy does not allow it", a)
		}
	}
	for a := range allowed {
		if !code[a] {
			t.Errorf("docs/aws.md's policy allows %s, which the provider never calls: remove it", a)
		}
	}
}
