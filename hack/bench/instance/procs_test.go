package main

import (
	"testing"
	"time"
)

// utime and stime are found after a command name that holds spaces and parentheses, and a line
// cut short is refused.
func TestStatCPU(t *testing.T) {
	for _, tc := range []struct {
		name, stat string
		want       time.Duration
		ok         bool
	}{
		{"plain", "42 (etcd) S 1 42 42 0 -1 4194560 100 0 0 0 1500 250 0 0 20 0 12 0 99 0 0", 17500 * time.Millisecond, true},
		{"name with spaces and parentheses", "7 (a (b) c) R 1 7 7 0 -1 0 0 0 0 0 3 4 0 0 20 0 1 0 5", 70 * time.Millisecond, true},
		{"cut short", "7 (x) R 1 7 7 0", 0, false},
		{"no name", "garbage", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := statCPU(tc.stat)
			if got != tc.want || ok != tc.ok {
				t.Errorf("statCPU(%q) = %v, %v; want %v, %v", tc.stat, got, ok, tc.want, tc.ok)
			}
		})
	}
}
