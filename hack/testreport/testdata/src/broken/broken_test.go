package broken

import "testing"

func TestNever(t *testing.T) { var x int = "a" }
