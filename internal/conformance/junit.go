// Reading the suite's JUnit report (e2e.test --report-dir writes junit_01.xml) into counts and
// the failures with their reasons.

package conformance

import (
	"encoding/xml"
	"fmt"
	"io"
	"sort"
	"strings"
)

// junitSuites is the part of a JUnit report the summary reads, as ginkgo writes it.
type junitSuites struct {
	Suites []struct {
		Cases []junitCase `xml:"testcase"`
	} `xml:"testsuite"`
}

type junitCase struct {
	Name    string   `xml:"name,attr"`
	Status  string   `xml:"status,attr"`
	Time    float64  `xml:"time,attr"`
	Skipped *message `xml:"skipped"`
	Failure *message `xml:"failure"`
	Error   *message `xml:"error"`
}

type message struct {
	Message string `xml:"message,attr"`
	Text    string `xml:",chardata"`
}

// Result is one test that did not pass, and why.
type Result struct {
	Name   string
	Reason string
}

// Summary is what a run of the suite came to, over the tests named [Conformance]: the report
// also lists every test the focus left out, as skipped, and those are not counted.
type Summary struct {
	Passed, Failed, Skipped int
	Failures                []Result // failed, panicked, timed out or interrupted
	Skips                   []Result // skipped at run time or by the run's skip list
	// SuiteFailures are the suite's own setup and teardown nodes that failed
	// ([SynchronizedBeforeSuite] and the like): their failure fails every test.
	SuiteFailures []Result
}

// Total is every [Conformance] test the report lists.
func (s Summary) Total() int { return s.Passed + s.Failed + s.Skipped }

// Line is the last line `make conformance` prints.
func (s Summary) Line() string {
	return fmt.Sprintf("conformance: passed=%d failed=%d skipped=%d total=%d", s.Passed, s.Failed, s.Skipped, s.Total())
}

// ParseJUnit reads a JUnit report of the suite.
func ParseJUnit(r io.Reader) (Summary, error) {
	var doc junitSuites
	if err := xml.NewDecoder(r).Decode(&doc); err != nil {
		return Summary{}, fmt.Errorf("reading the JUnit report: %w", err)
	}
	var s Summary
	seen := false
	for _, suite := range doc.Suites {
		for _, c := range suite.Cases {
			seen = true
			failed := c.Failure != nil || c.Error != nil || (c.Status != "" && c.Status != "passed" && c.Status != "skipped")
			if strings.HasPrefix(c.Name, "[") && !strings.HasPrefix(c.Name, "[It]") {
				if failed { // a suite node: [SynchronizedBeforeSuite], [ReportAfterSuite], ...
					s.SuiteFailures = append(s.SuiteFailures, Result{Name: c.Name, Reason: reason(c)})
				}
				continue
			}
			if !strings.Contains(c.Name, "[Conformance]") {
				continue
			}
			switch {
			case failed:
				s.Failed++
				s.Failures = append(s.Failures, Result{Name: c.Name, Reason: reason(c)})
			case c.Skipped != nil || c.Status == "skipped":
				s.Skipped++
				s.Skips = append(s.Skips, Result{Name: c.Name, Reason: reason(c)})
			default:
				s.Passed++
			}
		}
	}
	if !seen {
		return Summary{}, fmt.Errorf("the JUnit report lists no test")
	}
	byName := func(rs []Result) { sort.Slice(rs, func(i, j int) bool { return rs[i].Name < rs[j].Name }) }
	byName(s.Failures)
	byName(s.Skips)
	return s, nil
}

// maxReason bounds a reason printed for one test: the first lines of its failure say why; the
// whole text is in the report.
const maxReason = 600

// reason is why a test failed or was skipped: the failure's message, else the first lines of
// its text.
func reason(c junitCase) string {
	var m *message
	for _, x := range []*message{c.Failure, c.Error, c.Skipped} {
		if x != nil {
			m = x
			break
		}
	}
	if m == nil {
		return c.Status
	}
	text := strings.TrimSpace(m.Message)
	if text == "" || text == "skipped" || text == "failed" {
		text = strings.TrimSpace(m.Text)
	}
	text = strings.Join(strings.Fields(text), " ")
	if len(text) > maxReason {
		text = text[:maxReason] + " ..."
	}
	if text == "" {
		text = c.Status
	}
	return text
}
