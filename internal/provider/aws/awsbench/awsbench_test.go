package awsbench_test

import (
	"context"
	"testing"
	"time"

	"herd.dev/herd/internal/provider/aws/awsbench"
)

// herd's controller takes 48 instances in 4 EC2 regions up while EC2 throttles and lags, and
// deletes them: one EC2 instance per name, none left running. (make bench-aws runs 1,000 and
// reports the calls; no figure is asserted here.)
func TestShortScale(t *testing.T) {
	fig, err := awsbench.Run(context.Background(), t, awsbench.Options{
		Regions: []string{"us-east-1", "eu-west-1", "ap-southeast-2", "sa-east-1"},
		Fleets:  2, PerRegion: 6,
		PendingDelay: 200 * time.Millisecond, ShutdownDelay: 100 * time.Millisecond,
		Lag: time.Second, ThrottleRate: 3, ThrottleBurst: 4, MaxBackoff: 200 * time.Millisecond,
		Dir: t.TempDir(), Timeout: 2 * time.Minute, Progress: t.Logf,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Log(fig.Line())
	if fig.Throttled == 0 {
		t.Error("the twin throttled no call: the scale-up met no throttling")
	}
	if fig.Duplicates != 0 || fig.Leaked != 0 {
		t.Errorf("%d EC2 instances for %d instances: %d duplicates, %d leaked; want 0 and 0", fig.EC2Instances, fig.Instances, fig.Duplicates, fig.Leaked)
	}
}
