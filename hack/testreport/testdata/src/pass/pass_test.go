package pass

import "testing"

func TestAdd(t *testing.T) {
	t.Log("adding")
	if 1+1 != 2 {
		t.Fatal("1+1 != 2")
	}
}

func TestTable(t *testing.T) {
	for _, n := range []string{"one", "two"} {
		t.Run(n, func(t *testing.T) { t.Log(n) })
	}
}
