// Command doclinks checks the references between herd's documents, for make lint. Documents move:
// one that grows past the project's 600 lines is split by concern, and what pointed into it must
// follow. It checks every file git tracks:
//
//   - in Markdown, every relative link [text](path) or [text](path#anchor) must name a tracked file
//     or directory, and an anchor one of the headings of the Markdown file it names (GitHub's
//     anchors: the heading in lower case, without punctuation, spaces as hyphens);
//   - anywhere (comments, prose, Makefile), every docs/*.md path mentioned must be a tracked file.
//
// It prints each broken reference as FILE:LINE and exits non-zero if there is one.
//
// Usage: go run ./hack/doclinks (at the top of the repository)
package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path"
	"regexp"
	"strings"
	"unicode"
)

func main() {
	out, err := exec.Command("git", "ls-files", "-z").Output()
	if err != nil {
		fmt.Fprintln(os.Stderr, "doclinks: git ls-files:", err)
		os.Exit(2)
	}
	var files []string
	for _, f := range strings.Split(string(out), "\x00") {
		if f != "" {
			files = append(files, f)
		}
	}
	problems := check(files, os.ReadFile)
	for _, p := range problems {
		fmt.Println(p)
	}
	if len(problems) > 0 {
		fmt.Printf("doclinks: %d broken references: point each at the file (and heading) that holds the text now\n", len(problems))
		os.Exit(1)
	}
}

var (
	// markdownLink is the target of an inline link or image: ](target).
	markdownLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	// docsPath is a docs/...md path mentioned as text, not as the tail of a longer path or URL.
	docsPath = regexp.MustCompile(`(?:^|[^\w/.-])(docs/[\w./-]*\w\.md)`)
	// scheme starts an absolute URL (https:, mailto:).
	scheme  = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
	heading = regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)
)

// check returns the broken references of files (paths relative to the repository's top), reading
// each with read.
func check(files []string, read func(string) ([]byte, error)) []string {
	tracked := map[string]bool{}
	for _, f := range files {
		tracked[f] = true
		for d := path.Dir(f); d != "."; d = path.Dir(d) {
			tracked[d] = true
		}
	}
	anchorsOf := map[string]map[string]bool{}
	anchors := func(f string) (map[string]bool, error) {
		if a, ok := anchorsOf[f]; ok {
			return a, nil
		}
		b, err := read(f)
		if err != nil {
			return nil, err
		}
		a := headingAnchors(b)
		anchorsOf[f] = a
		return a, nil
	}

	var problems []string
	for _, f := range files {
		if !textFile(f) {
			continue
		}
		b, err := read(f)
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", f, err))
			continue
		}
		isMarkdown := strings.HasSuffix(f, ".md")
		fence := false
		for i, line := range strings.Split(string(b), "\n") {
			at := fmt.Sprintf("%s:%d", f, i+1)
			if isMarkdown && strings.HasPrefix(strings.TrimSpace(line), "```") {
				fence = !fence
				continue
			}
			prose := line
			if isMarkdown {
				prose = markdownLink.ReplaceAllString(line, "]") // links are checked below, relative to f
			}
			for _, m := range docsPath.FindAllStringSubmatch(prose, -1) {
				if !tracked[m[1]] {
					problems = append(problems, fmt.Sprintf("%s: %s: no such file", at, m[1]))
				}
			}
			if !isMarkdown || fence {
				continue
			}
			for _, m := range markdownLink.FindAllStringSubmatch(line, -1) {
				if p := checkLink(f, m[1], tracked, anchors); p != "" {
					problems = append(problems, fmt.Sprintf("%s: link %s: %s", at, m[1], p))
				}
			}
		}
	}
	return problems
}

// checkLink says what is wrong with the link target in file from, or "" when nothing is.
func checkLink(from, target string, tracked map[string]bool, anchors func(string) (map[string]bool, error)) string {
	if scheme.MatchString(target) || strings.HasPrefix(target, "//") {
		return ""
	}
	file, anchor, _ := strings.Cut(target, "#")
	to := from
	if file != "" {
		to = path.Join(path.Dir(from), file)
		if to == ".." || strings.HasPrefix(to, "../") {
			return "outside the repository"
		}
		if !tracked[to] {
			return "no such file " + to
		}
	}
	if anchor == "" || !strings.HasSuffix(to, ".md") {
		return ""
	}
	a, err := anchors(to)
	if err != nil {
		return err.Error()
	}
	if !a[anchor] {
		return "no heading of " + to + " has the anchor #" + anchor
	}
	return ""
}

// headingAnchors returns the anchors GitHub gives the headings of a Markdown document: the second
// heading with the same anchor gets -1, the third -2.
func headingAnchors(doc []byte) map[string]bool {
	anchors := map[string]bool{}
	seen := map[string]int{}
	fence := false
	for _, line := range bytes.Split(doc, []byte("\n")) {
		if bytes.HasPrefix(bytes.TrimSpace(line), []byte("```")) {
			fence = !fence
			continue
		}
		m := heading.FindSubmatch(line)
		if fence || m == nil {
			continue
		}
		s := slug(string(m[1]))
		if n := seen[s]; n > 0 {
			anchors[fmt.Sprintf("%s-%d", s, n)] = true
		} else {
			anchors[s] = true
		}
		seen[s]++
	}
	return anchors
}

// slug is GitHub's anchor of a heading's text: lower case, letters, digits, hyphens and
// underscores kept, spaces made hyphens, everything else dropped.
func slug(text string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case unicode.IsLetter(r), unicode.IsDigit(r), r == '-', r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

// textFile says whether f is a file people write references in. This command's own files are not:
// its tests name missing files on purpose.
func textFile(f string) bool {
	if strings.HasPrefix(f, "hack/doclinks/") {
		return false
	}
	switch path.Ext(f) {
	case ".md", ".go", ".sh", ".txt", ".yaml", ".yml", ".json", ".toml":
		return !strings.Contains(f, "/vendor/")
	}
	return path.Base(f) == "Makefile" || strings.HasPrefix(path.Base(f), "Dockerfile")
}
