package edge

import (
	"math"
	"net/http"
	"slices"
	"time"

	"github.com/maypok86/otter/v2"
)

// keepForValidation is how long a stale object with a validator is kept beyond its lifetime and
// stale windows, so that a 304 can refresh it instead of the origin sending it again.
const keepForValidation = time.Hour

// entry holds every stored variant of one URI. It is immutable: a change stores a new entry, so that
// readers never lock and the weigher sees the entry's whole size.
type entry struct {
	vary     []string           // the header names the latest stored response varies on
	variants map[string]*object // by secondary key
	retain   time.Duration      // how long the entry stays worth keeping
}

// store is the memory tier: entries by primary key in an otter cache bounded by bytes.
type store struct {
	c *otter.Cache[string, *entry]
}

func newStore(maxBytes int64) *store {
	return &store{c: otter.Must(&otter.Options[string, *entry]{
		MaximumWeight: uint64(maxBytes),
		Weigher: func(key string, e *entry) uint32 {
			n := len(key)
			for k, o := range e.variants {
				n += len(k) + o.size()
			}
			return uint32(min(n, math.MaxUint32))
		},
		ExpiryCalculator: otter.ExpiryWritingFunc(func(e otter.Entry[string, *entry]) time.Duration {
			return e.Value.retain
		}),
	})}
}

// lookup returns the variant of the entry at pk that the request selects, if any.
func (s *store) lookup(pk string, r *http.Request, p Policy) *object {
	e, ok := s.c.GetIfPresent(pk)
	if !ok {
		return nil
	}
	return e.variants[secondaryKey(r, e.vary, p)]
}

// put stores o as the variant the request selects. A response that varies on other headers than
// the stored ones replaces every variant: they were selected by a rule the origin no longer uses.
func (s *store) put(pk string, r *http.Request, p Policy, o *object, vary []string) {
	o.secondary = secondaryKey(r, vary, p)
	s.c.Compute(pk, func(old *entry, found bool) (*entry, otter.ComputeOp) {
		e := &entry{vary: vary, variants: map[string]*object{o.secondary: o}}
		if found && slices.Equal(old.vary, vary) {
			for k, v := range old.variants {
				if k != o.secondary {
					e.variants[k] = v
				}
			}
		}
		for _, v := range e.variants {
			e.retain = max(e.retain, v.retention())
		}
		return e, otter.WriteOp
	})
}

// invalidate drops every variant stored for pk.
func (s *store) invalidate(pk string) bool {
	_, ok := s.c.Invalidate(pk)
	return ok
}

// retention is how long past now the object may still serve: its lifetime, its stale windows and,
// when it can be validated, time to be refreshed by a 304.
func (o *object) retention() time.Duration {
	d := o.lifetime
	var window time.Duration
	for _, name := range []string{"stale-while-revalidate", "stale-if-error"} {
		if w, ok := o.cc.seconds(name); ok {
			window = max(window, w)
		}
	}
	d += window
	if o.header.Get("ETag") != "" || o.header.Get("Last-Modified") != "" {
		d += keepForValidation
	}
	return max(d, time.Second)
}
