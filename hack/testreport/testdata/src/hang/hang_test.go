package hang

import (
	"testing"
	"time"
)

func TestQuick(t *testing.T) {}

func TestHangs(t *testing.T) {
	t.Log("waiting for an answer that never comes")
	time.Sleep(time.Minute)
}
