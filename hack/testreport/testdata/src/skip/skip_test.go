package skip

import "testing"

func TestRuns(t *testing.T) {}

func TestNeedsTwoNodes(t *testing.T) {
	t.Log("looking for a second node")
	t.Skip("needs a cluster of two nodes")
}

func TestNeedsTool(t *testing.T) {
	t.Run("found", func(t *testing.T) {})
	t.Run("missing", func(t *testing.T) { t.Skipf("frobnicate not found on PATH (run make deps)") })
}
