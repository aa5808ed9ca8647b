// Shape: the latency, jitter and loss of a region's link to the internet, from the region's
// options, and how each packet is delayed or dropped by the link relay (linkrelay.go).

package netlab

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Region options of the network lab: the shape of a region's link.
const (
	// OptionLatency is the round-trip time a region's link adds, as a Go duration ("40ms").
	OptionLatency = "latency"
	// OptionJitter is how much the round-trip time varies around the latency, as a Go duration.
	OptionJitter = "jitter"
	// OptionLoss is the share of packets the link drops, in each direction ("1%", "0.5%").
	OptionLoss = "loss"
)

// MaxShapeDelay bounds the delays of the options: a minute of latency or jitter is already far
// beyond any real distance.
const MaxShapeDelay = time.Minute

// Shape is how a link between a region (or a client network) and the internet treats packets.
// The zero Shape passes every packet at once.
type Shape struct {
	// Latency is the round-trip time the link adds: each direction delays a packet by half of it,
	// so that a ping or a TCP handshake across the link takes Latency more. Default 0.
	Latency time.Duration `json:"latency,omitempty"`
	// Jitter varies each packet's delay uniformly by up to half of it either way (so that round
	// trips vary by up to Jitter either way around Latency). Packets keep their order. Default 0.
	Jitter time.Duration `json:"jitter,omitempty"`
	// Loss is the probability, 0 to 1, that the link drops a packet, in each direction. Default 0.
	Loss float64 `json:"loss,omitempty"`
}

// String formats the shape as the options would write it.
func (s Shape) String() string {
	return fmt.Sprintf("latency=%s jitter=%s loss=%s", s.Latency, s.Jitter, formatLoss(s.Loss))
}

func formatLoss(l float64) string { return strconv.FormatFloat(l*100, 'f', -1, 64) + "%" }

// ParseShape reads the shape options of a region (see OptionLatency, OptionJitter, OptionLoss);
// absent options are zero.
func ParseShape(path *field.Path, opts map[string]string) (Shape, field.ErrorList) {
	var s Shape
	var errs field.ErrorList
	if v, ok := opts[OptionLatency]; ok {
		d, err := parseShapeDelay(v)
		if err != nil {
			errs = append(errs, field.Invalid(path.Child(OptionLatency), v, err.Error()))
		}
		s.Latency = d
	}
	if v, ok := opts[OptionJitter]; ok {
		d, err := parseShapeDelay(v)
		if err != nil {
			errs = append(errs, field.Invalid(path.Child(OptionJitter), v, err.Error()))
		}
		s.Jitter = d
	}
	if v, ok := opts[OptionLoss]; ok {
		l, err := ParseLoss(v)
		if err != nil {
			errs = append(errs, field.Invalid(path.Child(OptionLoss), v, err.Error()))
		}
		s.Loss = l
	}
	return s, errs
}

func parseShapeDelay(v string) (time.Duration, error) {
	d, err := time.ParseDuration(strings.TrimSpace(v))
	switch {
	case err != nil:
		return 0, fmt.Errorf("must be a duration such as 40ms or 1.5s")
	case d < 0:
		return 0, fmt.Errorf("must not be negative: use 0 for none")
	case d > MaxShapeDelay:
		return 0, fmt.Errorf("must be at most %s", MaxShapeDelay)
	}
	return d, nil
}

// ParseLoss reads a packet loss written as a percentage ("20%", "0.5%") or as a fraction
// ("0.2") and returns the fraction.
func ParseLoss(v string) (float64, error) {
	s := strings.TrimSpace(v)
	pct := strings.HasSuffix(s, "%")
	f, err := strconv.ParseFloat(strings.TrimSuffix(s, "%"), 64)
	if err != nil || f != f { // f != f: NaN
		return 0, fmt.Errorf("must be a percentage such as 1%% or 0.5%%")
	}
	if pct {
		f /= 100
	}
	switch {
	case f < 0:
		return 0, fmt.Errorf("must not be negative: use 0%% for none")
	case f > 1:
		return 0, fmt.Errorf("must be at most 100%%")
	}
	return f, nil
}

// oneWayDelay returns the delay of one packet in one direction: half the round-trip latency,
// moved by up to half the jitter either way, never below zero.
func (s Shape) oneWayDelay(rnd *rand.Rand) time.Duration {
	d := s.Latency / 2
	if s.Jitter > 0 {
		d += time.Duration(rnd.Int64N(int64(s.Jitter)+1)) - s.Jitter/2
	}
	return max(d, 0)
}

// drops reports whether the link drops a packet.
func (s Shape) drops(rnd *rand.Rand) bool {
	return s.Loss > 0 && (s.Loss >= 1 || rnd.Float64() < s.Loss)
}
