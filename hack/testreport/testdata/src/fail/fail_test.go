package fail

import "testing"

func TestGood(t *testing.T) {}

func TestBad(t *testing.T) {
	t.Log("before the check")
	t.Run("inner", func(t *testing.T) { t.Errorf("got 3, want 4") })
}
