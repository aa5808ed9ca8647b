// Command aws benchmarks herd's controller on the EC2 twin (internal/provider/aws/awsbench): 1,000
// instances in 4 EC2 regions taken up while each region of the twin throttles beyond a token
// bucket below the provider's own rate limit and DescribeInstances lags behind launches, a steady
// window with nothing changing, then every fleet deleted. The twin's instances are records, so no
// real instance runs. The last line is the figure `make bench-aws` reports:
//
//	aws: instances=<int> steady_calls_per_min=<float> create_calls_per_instance=<float> duplicates=<int> leaked=<int>
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"time"

	"golang.org/x/time/rate"

	"herd.dev/herd/internal/provider/aws/awsbench"
)

func main() {
	fleets := flag.Int("fleets", 10, "fleets, each in every region")
	perRegion := flag.Int("per-region", 25, "instances of each fleet in each region")
	steady := flag.Duration("steady", 3*time.Minute, "window with nothing changing over which calls are counted")
	resync := flag.Duration("resync", time.Minute, "the controller's safety resync (herd up's is 5m: a shorter one lists more)")
	throttle := flag.Float64("throttle-rate", 4, "each region's calls a second the twin answers during the scale-up, beyond which it throttles")
	burst := flag.Int("throttle-burst", 8, "the burst of that bucket")
	lag := flag.Duration("lag", 5*time.Second, "how long a new instance is invisible to DescribeInstances during the scale-up")
	flag.Parse()

	dir, err := os.MkdirTemp("", "herd-bench-aws-")
	if err != nil {
		log.Fatal(err)
	}
	var cleanups cleanup
	defer func() {
		cleanups.run()
		_ = os.RemoveAll(dir)
	}()
	fig, err := awsbench.Run(context.Background(), &cleanups, awsbench.Options{
		Regions: []string{"us-east-1", "eu-west-1", "ap-southeast-2", "sa-east-1"},
		Fleets:  *fleets, PerRegion: *perRegion, Steady: *steady, ResyncPeriod: *resync,
		PendingDelay: 3 * time.Second, ShutdownDelay: 2 * time.Second, Lag: *lag,
		ThrottleRate: rate.Limit(*throttle), ThrottleBurst: *burst,
		Dir: dir, Progress: func(format string, args ...any) { fmt.Printf(format+"\n", args...) },
	})
	if err != nil {
		cleanups.run()
		log.Fatal(err)
	}
	fmt.Printf("EC2 calls in all: %v\n", fig.CallsByAction)
	fmt.Println(fig.Line())
}

// cleanup runs what awsbench.Run registers, last first, as testing.T does.
type cleanup []func()

func (c *cleanup) Cleanup(f func()) { *c = append(*c, f) }

func (c *cleanup) run() {
	for i := len(*c) - 1; i >= 0; i-- {
		(*c)[i]()
	}
	*c = nil
}
