package conformance

import (
	"os"
	"strings"
	"testing"
)

func TestParseJUnit(t *testing.T) {
	f, err := os.Open("testdata/junit_01.xml")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s, err := ParseJUnit(f)
	if err != nil {
		t.Fatal(err)
	}
	// The [Feature:CSI] test the focus left out is not counted; the suite nodes neither.
	if got, want := s.Line(), "conformance: passed=1 failed=2 skipped=1 total=4"; got != want {
		t.Errorf("Line() = %q, want %q", got, want)
	}
	if len(s.Failures) != 2 {
		t.Fatalf("Failures = %+v, want the DNS and Job tests", s.Failures)
	}
	dns, job := s.Failures[1], s.Failures[0] // sorted by name: [sig-apps] before [sig-network]
	if !strings.Contains(dns.Name, "DNS should provide DNS for services") ||
		!strings.HasPrefix(dns.Reason, "[FAILED] dig result did not match:") || strings.Contains(dns.Reason, "\n") {
		t.Errorf("DNS failure = %+v: want its text on one line, as the message is empty", dns)
	}
	if !strings.Contains(job.Name, "Job should run a job") || job.Reason != "A suite timeout occurred" {
		t.Errorf("timed-out test = %+v", job)
	}
	if len(s.Skips) != 1 || !strings.Contains(s.Skips[0].Name, "two untainted nodes") {
		t.Errorf("Skips = %+v", s.Skips)
	}
	if len(s.SuiteFailures) != 1 || s.SuiteFailures[0].Reason != "could not write the report" {
		t.Errorf("SuiteFailures = %+v", s.SuiteFailures)
	}
}

func TestParseJUnitRejectsEmpty(t *testing.T) {
	for _, doc := range []string{"", "<testsuites></testsuites>", "not xml"} {
		if _, err := ParseJUnit(strings.NewReader(doc)); err == nil {
			t.Errorf("ParseJUnit(%q): no error", doc)
		}
	}
}

func TestReasonIsBounded(t *testing.T) {
	long := strings.Repeat("x", 2*maxReason)
	r := reason(junitCase{Status: "failed", Failure: &message{Message: long}})
	if len(r) > maxReason+4 || !strings.HasSuffix(r, " ...") {
		t.Errorf("reason of %d bytes: %d bytes, %q...", len(long), len(r), r[:20])
	}
}
