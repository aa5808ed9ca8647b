package fnvmix

import (
	"hash/fnv"
	"testing"
)

// FNV1a is the standard library's FNV-1a, without its allocation.
func TestFNV1aIsStandard(t *testing.T) {
	for _, s := range []string{"", "a", "web/http\x00b", "10.216.1.0/24"} {
		h := fnv.New64a()
		h.Write([]byte(s))
		if got, want := FNV1a(s), h.Sum64(); got != want || FNV1a([]byte(s)) != want {
			t.Errorf("FNV1a(%q) = %x, want %x", s, got, want)
		}
	}
}

// Mix64 spreads neighbours: consecutive inputs differ in about half of their output bits.
func TestMix64Spreads(t *testing.T) {
	total := 0
	const n = 1000
	for i := range uint64(n) {
		d := Mix64(i) ^ Mix64(i+1)
		for ; d != 0; d &= d - 1 {
			total++
		}
	}
	if avg := float64(total) / n; avg < 28 || avg > 36 {
		t.Errorf("consecutive inputs differ in %.1f of 64 bits on average, want about 32", avg)
	}
}
