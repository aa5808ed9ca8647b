// Package awsbench drives herd's controller over the EC2 twin at scale: fleets in several EC2
// regions, created while the twin throttles and DescribeInstances lags behind launches, left alone
// for a steady window, then deleted. It counts the EC2 calls each phase cost, the duplicate
// launches and the instances left running, for `make bench-aws` (hack/bench/aws) and for the short
// run of `make test` (no real instances: the twin's instances are records).
package awsbench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"time"

	"golang.org/x/time/rate"
	"k8s.io/apimachinery/pkg/util/wait"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/controller"
	"herd.dev/herd/internal/provider"
	"herd.dev/herd/internal/provider/aws"
	"herd.dev/herd/internal/provider/aws/awstwin"
	"herd.dev/herd/internal/store"
	"herd.dev/herd/internal/store/bolt"
)

// image is the digest the fleets boot: the twin has an AMI tagged with it in every region.
const image = "sha256:awsbench"

// Options size a run.
type Options struct {
	// Regions are the EC2 regions, one herd region each.
	Regions []string
	// Fleets, each in every region with PerRegion instances in each.
	Fleets, PerRegion int
	// Steady is the window with nothing changing over which calls are counted; 0 skips it.
	Steady time.Duration
	// ResyncPeriod is the controller's safety resync. Default: the controller's.
	ResyncPeriod time.Duration
	// PendingDelay and ShutdownDelay are the twin's (how long an instance boots and terminates).
	PendingDelay, ShutdownDelay time.Duration
	// Lag is how long a new instance is invisible to DescribeInstances during the scale-up.
	Lag time.Duration
	// ThrottleRate and ThrottleBurst are the token bucket of each region of the twin during the
	// scale-up (calls beyond it are answered RequestLimitExceeded): below the provider's own
	// limit, as when the account's other callers spend part of EC2's budget. 0: none.
	ThrottleRate  rate.Limit
	ThrottleBurst int
	// MaxBackoff caps the provider's backoff between attempts of a throttled call. Default: the
	// provider's (the SDK's 20s).
	MaxBackoff time.Duration
	// Dir holds the controller's store.
	Dir string
	// Timeout bounds each phase. Default: 10 minutes.
	Timeout time.Duration
	// Progress, when set, is told what each phase did.
	Progress func(format string, args ...any)
	Logger   *slog.Logger
}

// Figures are what a run measured.
type Figures struct {
	Instances int
	// ScaleUp is how long the scale-up took, and CreateCalls how many EC2 calls it cost (every
	// call the twin answered, throttled ones and lists included).
	ScaleUp     time.Duration
	CreateCalls int
	Throttled   int
	// SteadyCalls were made in the steady window.
	SteadyCalls   int
	SteadyPerMin  float64
	DeleteCalls   int
	Duplicates    int // EC2 instances launched beyond one per instance name
	Leaked        int // EC2 instances not terminated once every fleet was deleted
	EC2Instances  int
	CallsByAction map[string]int
}

// Line is the figures as `make bench-aws` prints them last.
func (f Figures) Line() string {
	perInstance := 0.0
	if f.Instances > 0 {
		perInstance = float64(f.CreateCalls) / float64(f.Instances)
	}
	return fmt.Sprintf("aws: instances=%d steady_calls_per_min=%.2f create_calls_per_instance=%.3f duplicates=%d leaked=%d",
		f.Instances, f.SteadyPerMin, perInstance, f.Duplicates, f.Leaked)
}

// Run runs the scenario; cleanup registers what to stop at the end (a testing.T, or the
// command's own list).
func Run(ctx context.Context, cleanup interface{ Cleanup(func()) }, o Options) (Figures, error) {
	if o.Timeout == 0 {
		o.Timeout = 10 * time.Minute
	}
	if o.Progress == nil {
		o.Progress = func(string, ...any) {}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	tw := awstwin.New(cleanup, awstwin.Options{PendingDelay: o.PendingDelay, ShutdownDelay: o.ShutdownDelay})
	for _, r := range o.Regions {
		tw.AddImage(r, "herd-node", map[string]string{"herd.dev/image": image})
	}
	prov, err := aws.New(aws.Options{
		Installation: "awsbench", Credentials: tw.Credentials(), StateDir: filepath.Join(o.Dir, "aws"),
		MaxBackoff: o.MaxBackoff, Logger: o.Logger,
	})
	if err != nil {
		return Figures{}, err
	}
	st, err := bolt.Open(filepath.Join(o.Dir, "state.db"))
	if err != nil {
		return Figures{}, err
	}
	defer st.Close()
	ctrl, err := controller.New(controller.Options{
		Store: st, Providers: map[string]provider.Provider{aws.Name: prov}, Logger: o.Logger,
		ResyncPeriod: o.ResyncPeriod,
	})
	if err != nil {
		return Figures{}, err
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- ctrl.Start(ctx) }()
	defer func() { cancel(); <-done }()

	b := &run{o: o, tw: tw, ctrl: ctrl, store: st}
	fig := Figures{Instances: o.Fleets * o.PerRegion * len(o.Regions)}
	if err := b.scaleUp(ctx, &fig); err != nil {
		return fig, err
	}
	if err := b.steady(ctx, &fig); err != nil {
		return fig, err
	}
	if err := b.deleteAll(ctx, &fig); err != nil {
		return fig, err
	}
	fig.CallsByAction = tw.Calls()
	return fig, nil
}

// run is one scenario's parts.
type run struct {
	o     Options
	tw    *awstwin.Twin
	ctrl  *controller.Controller
	store store.Store
}

func (b *run) fleet(i int) *v1alpha1.Fleet {
	n := int32(b.o.PerRegion)
	f := &v1alpha1.Fleet{
		TypeMeta: v1alpha1.TypeMeta{APIVersion: v1alpha1.GroupVersion, Kind: v1alpha1.KindFleet},
		Metadata: v1alpha1.ObjectMeta{Name: fleetName(i), Generation: 1},
		Spec:     v1alpha1.FleetSpec{Image: image, Replicas: v1alpha1.Replicas{Desired: &n, Max: &n}},
	}
	for _, r := range b.o.Regions {
		f.Spec.Regions = append(f.Spec.Regions, v1alpha1.Region{Name: r, Provider: aws.Name, Options: map[string]string{
			"region": r, "endpoint": b.tw.URL, "instanceTypes": "m7i.large,m6i.large",
		}})
	}
	v1alpha1.SetFleetDefaults(f, aws.Name)
	return f
}

func fleetName(i int) string { return fmt.Sprintf("fleet-%03d", i) }

// scaleUp stores every fleet and waits until the controller holds every instance Ready, while the
// twin throttles and lags.
func (b *run) scaleUp(ctx context.Context, fig *Figures) error {
	b.tw.Lag(b.o.Lag)
	b.tw.RateLimit(b.o.ThrottleRate, b.o.ThrottleBurst)
	calls0 := b.calls()
	begin := time.Now()
	for i := range b.o.Fleets {
		op, err := store.PutOp(store.Fleets, b.fleet(i))
		if err != nil {
			return err
		}
		if _, err := b.store.Txn(ctx, op); err != nil {
			return err
		}
	}
	err := b.await(ctx, "every instance Ready", func() bool {
		for i := range b.o.Fleets {
			if ready, booting := b.ctrl.InstanceCounts(fleetName(i)); ready != b.o.PerRegion*len(b.o.Regions) || booting != 0 {
				return false
			}
		}
		return true
	})
	b.tw.RateLimit(rate.Inf, 0)
	b.tw.Lag(0)
	if err != nil {
		return err
	}
	fig.ScaleUp, fig.CreateCalls, fig.Throttled = time.Since(begin), b.calls()-calls0, b.tw.Throttled()
	b.o.Progress("scale-up: %d instances Ready in %.1fs, %d EC2 calls (%d throttled): %v",
		fig.Instances, fig.ScaleUp.Seconds(), fig.CreateCalls, fig.Throttled, b.tw.Calls())
	return nil
}

// steady counts the calls of a window in which nothing changes.
func (b *run) steady(ctx context.Context, fig *Figures) error {
	if b.o.Steady <= 0 {
		return nil
	}
	calls0 := b.calls()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(b.o.Steady):
	}
	fig.SteadyCalls = b.calls() - calls0
	fig.SteadyPerMin = float64(fig.SteadyCalls) / b.o.Steady.Minutes()
	b.o.Progress("steady: %d EC2 calls in %s (%.2f a minute), %d reconciles in all",
		fig.SteadyCalls, b.o.Steady, fig.SteadyPerMin, b.ctrl.Reconciles())
	return nil
}

// deleteAll deletes every fleet, waits until the controller holds no instance record, and counts
// the EC2 instances left running and those launched twice.
func (b *run) deleteAll(ctx context.Context, fig *Figures) error {
	calls0 := b.calls()
	begin := time.Now()
	for i := range b.o.Fleets {
		if err := store.Delete(ctx, b.store, store.Fleets, fleetName(i), 0); err != nil {
			return err
		}
	}
	err := b.await(ctx, "every instance record gone", func() bool {
		recs, _, err := b.store.List(ctx, store.Instances)
		return err == nil && len(recs) == 0
	})
	if err != nil {
		return err
	}
	fig.DeleteCalls = b.calls() - calls0
	names := map[string]bool{}
	all := b.tw.Instances()
	for _, in := range all {
		names[in.Tags["herd.dev/instance"]] = true
		if in.State != awstwin.StateTerminated {
			fig.Leaked++
		}
	}
	fig.EC2Instances, fig.Duplicates = len(all), len(all)-len(names)
	b.o.Progress("delete: every fleet deleted in %.1fs, %d EC2 calls; %d EC2 instances launched, %d not terminated",
		time.Since(begin).Seconds(), fig.DeleteCalls, len(all), fig.Leaked)
	return nil
}

// await polls cond until it holds, failing after the phase timeout.
func (b *run) await(ctx context.Context, what string, cond func() bool) error {
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, b.o.Timeout, true, func(context.Context) (bool, error) {
		return cond(), nil
	})
	if err != nil {
		return fmt.Errorf("awsbench: not %s within %s: %w", what, b.o.Timeout, err)
	}
	return nil
}

func (b *run) calls() int {
	n := 0
	for _, c := range b.tw.Calls() {
		n += c
	}
	return n
}
