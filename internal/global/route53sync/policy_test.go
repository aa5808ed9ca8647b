package route53sync_test

import (
	"encoding/json"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	"herd.dev/herd/internal/global/route53sync"
)

// The Route 53 policy of docs/aws.md allows exactly the actions the syncer can call: the
// methods of the one interface through which it reaches Route 53.
func TestPolicyMatchesTheCode(t *testing.T) {
	doc, err := os.ReadFile("../../../docs/aws.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, _ := strings.Cut(string(doc), "## Route 53\n")
	_, rest, ok := strings.Cut(section, "```json\n")
	block, _, ok2 := strings.Cut(rest, "```")
	if !ok || !ok2 {
		t.Fatal("docs/aws.md's Route 53 section has no ```json block holding its IAM statement")
	}
	var statement struct{ Action []string }
	if err := json.Unmarshal([]byte(block), &statement); err != nil {
		t.Fatalf("docs/aws.md's Route 53 statement is not JSON: %v", err)
	}
	var code []string
	api := reflect.TypeFor[route53sync.API]()
	for i := range api.NumMethod() {
		code = append(code, "route53:"+api.Method(i).Name)
	}
	slices.Sort(code)
	slices.Sort(statement.Action)
	if !slices.Equal(code, statement.Action) {
		t.Errorf("docs/aws.md allows %v; the syncer calls %v", statement.Action, code)
	}
}
