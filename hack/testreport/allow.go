package main

import (
	"bufio"
	"fmt"
	"io"
	"strings"
)

// allowList is the tests that may skip in make test, by package and test name, with why.
type allowList map[testID]string

// testID names one test or subtest as go test -json does: the package's import path and the test's
// name, "TestA/sub" for a subtest.
type testID struct{ pkg, test string }

func (id testID) String() string { return id.pkg + " " + id.test }

// parseAllowList reads one entry a line: the package, the test, then the reason, separated by
// spaces. Blank lines and lines starting with # are comments. name is used in errors.
func parseAllowList(name string, r io.Reader) (allowList, error) {
	list := allowList{}
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		pkg, rest, _ := strings.Cut(line, " ")
		test, reason, _ := strings.Cut(strings.TrimSpace(rest), " ")
		reason = strings.TrimSpace(reason)
		switch {
		case !isTestName(test):
			return nil, fmt.Errorf("%s:%d: %q: want <package> <test> <reason>, e.g. herd.dev/herd/internal/lb TestNearest/ipv6 needs an IPv6 loopback; the second field must be a test name (Test..., Example..., Fuzz...)", name, n, line)
		case reason == "":
			return nil, fmt.Errorf("%s:%d: %s has no reason: say after the test's name why it may skip", name, n, testID{pkg, test})
		}
		id := testID{pkg, test}
		if _, dup := list[id]; dup {
			return nil, fmt.Errorf("%s:%d: %s is listed twice: keep one line", name, n, id)
		}
		list[id] = reason
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	return list, nil
}

func isTestName(s string) bool {
	for _, p := range []string{"Test", "Example", "Fuzz"} {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}
