// Package design checks that docs/design.md's table of packages stays true: every package under
// internal/ has a line, and imports no herd package its line does not name. A new import is a
// design change; this test makes it one that the table shows.
package design

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

const module = "herd.dev/herd/internal/"

// row is what one line of the table says about its packages.
type row struct {
	mayImport []string
	any       bool // "any package above ...": the control plane, which builds every part
}

// readTable parses the table of packages in docs/design.md: | `pkg`, `pkg` | owns | `imports` |.
func readTable(t *testing.T) map[string]row {
	t.Helper()
	f, err := os.Open(filepath.Join("..", "..", "docs", "design.md"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	quoted := regexp.MustCompile("`([^`]+)`")
	rows := map[string]row{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		cells := strings.Split(line, "|")
		if len(cells) < 5 {
			t.Fatalf("docs/design.md: a table line with fewer than three cells: %q", line)
		}
		var r row
		for _, m := range quoted.FindAllStringSubmatch(cells[3], -1) {
			r.mayImport = append(r.mayImport, m[1])
		}
		r.any = strings.Contains(cells[3], "any package")
		for _, m := range quoted.FindAllStringSubmatch(cells[1], -1) {
			rows[m[1]] = r
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return rows
}

// allows says whether a row lets its package import imp; `agent/...` stands for agent's subpackages.
func (r row) allows(imp string) bool {
	if r.any || slices.Contains(r.mayImport, imp) || imp == "" {
		return true
	}
	for _, m := range r.mayImport {
		if prefix, ok := strings.CutSuffix(m, "/..."); ok && strings.HasPrefix(imp, prefix+"/") {
			return true
		}
	}
	return false
}

func TestDesignTableIsTrue(t *testing.T) {
	rows := readTable(t)
	// Imports only, not test imports: the test helpers and tests may import what they test.
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", "herd.dev/herd/internal/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for line := range strings.Lines(string(out)) {
		fields := strings.Fields(line)
		pkg := strings.TrimPrefix(fields[0], module)
		r, ok := rows[pkg]
		if !ok {
			t.Errorf("internal/%s has no line in docs/design.md's table of packages: add one (what it owns, what it may import)", pkg)
			continue
		}
		if strings.HasSuffix(pkg, "test") {
			continue
		}
		for _, imp := range fields[1:] {
			imp, ok := strings.CutPrefix(imp, module)
			if ok && imp != pkg && !r.allows(imp) {
				t.Errorf("internal/%s imports internal/%s, which its line in docs/design.md does not name: a design change, so add it to the line (or drop the import)", pkg, imp)
			}
		}
	}
}
