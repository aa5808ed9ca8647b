package edge

import (
	"iter"
	"math"
	"net/http"
	"slices"
	"time"

	"github.com/maypok86/otter/v2"
)

// keepForValidation is how long a stale object with a validator is kept beyond its lifetime and
// stale windows, so that a 304 can refresh it instead of the origin sending it again.
const keepForValidation = time.Hour

// maxVariants bounds the responses an entry holds: its variants by secondary key (Vary, and the
// policy's headers and cookies) and their compressed forms. A response stored into an entry that
// holds as many drops the one least recently stored or served, so that a field with many values
// (a User-Agent, say) keeps the ones clients ask for, and finding one is a short scan.
const maxVariants = 32

// entry holds every stored variant of one URI. It is immutable: a change stores a new entry, so that
// readers never lock and the weigher sees the entry's whole size.
type entry struct {
	vary []string // the header names the latest stored response varies on
	// variants by secondary key: a slice, not a map, since most entries hold one (a map of one
	// costs some 250 bytes more) and few hold more than a handful.
	variants []variant
	retain   time.Duration // how long the entry stays worth keeping
}

// variant is one stored response of an entry and the secondary key that selects it.
type variant struct {
	key string
	o   *object
}

// variant returns the object stored under the secondary key, if any.
func (e *entry) variant(key string) *object {
	for _, v := range e.variants {
		if v.key == key {
			return v.o
		}
	}
	return nil
}

// store is the memory tier: entries by primary key in an otter cache bounded by bytes; and the disk
// tier behind it, if there is one.
type store struct {
	c    *otter.Cache[string, *entry]
	disk *disk
}

func newStore(maxBytes int64) *store {
	return &store{c: otter.Must(&otter.Options[string, *entry]{
		MaximumWeight: uint64(maxBytes),
		Weigher: func(key string, e *entry) uint32 {
			return uint32(min(e.weight(key), math.MaxUint32))
		},
		ExpiryCalculator: otter.ExpiryWritingFunc(func(e otter.Entry[string, *entry]) time.Duration {
			return e.Value.retain
		}),
	})}
}

// lookup returns the variant of the entry at pk that the request selects, if any: the identity
// with coding "", or the variant compressed in coding.
func (s *store) lookup(pk string, r *http.Request, p Policy, coding string) *object {
	e := s.entry(pk)
	if e == nil {
		return nil
	}
	o := e.variant(codedKey(secondaryKey(r, e.vary, p), coding))
	if o != nil && len(e.variants) > 1 {
		o.used.Store(useClock.Add(1))
	}
	return o
}

// lookupPlain returns the identity variant stored at pk when the entry varies on nothing, so that
// it is the one every request selects under a policy that keys on no header or cookie.
func (s *store) lookupPlain(pk string) *object {
	if e := s.entry(pk); e != nil && len(e.vary) == 0 {
		return e.variant("")
	}
	return nil
}

// entry returns what is stored at pk, from memory or else from the disk tier.
func (s *store) entry(pk string) *entry {
	e, ok := s.c.GetIfPresent(pk)
	if !ok {
		if s.disk == nil {
			return nil
		}
		if e = s.disk.lookup(pk); e == nil {
			return nil
		}
		e, _ = s.c.SetIfAbsent(pk, e) // back in memory, unless another request got there first
	}
	return e
}

// codedKey is the variant key of a representation compressed in coding, next to its identity's.
func codedKey(secondary, coding string) string {
	if coding == "" {
		return secondary
	}
	return secondary + "\x00" + coding
}

// put stores o as the identity variant the request selects, and drops the compressed variants made
// from the one it replaces. A response that varies on other headers than the stored ones replaces
// every variant: they were selected by a rule the origin no longer uses.
func (s *store) put(pk string, r *http.Request, p Policy, o *object, vary []string) {
	o.secondary = secondaryKey(r, vary, p)
	e, _ := s.c.Compute(pk, func(old *entry, found bool) (*entry, otter.ComputeOp) {
		e := &entry{vary: vary, variants: []variant{{o.secondary, o}}}
		if found && slices.Equal(old.vary, vary) {
			e.variants = make([]variant, 1, 1+len(old.variants))
			e.variants[0] = variant{o.secondary, o}
			for _, v := range old.variants {
				if v.o.secondary != o.secondary { // neither the identity replaced nor what was compressed from it
					e.variants = append(e.variants, v)
				}
			}
			e.dropLeastUsed()
		}
		e.retain = e.retention()
		return e, otter.WriteOp
	})
	s.toDisk(pk, e)
}

// toDisk queues an entry just stored in memory for the disk tier.
func (s *store) toDisk(pk string, e *entry) {
	if s.disk != nil && e != nil {
		s.disk.put(pk, e)
	}
}

// putCoded stores c, base compressed in coding, beside base, if base is still what the store
// holds: a compressed variant of a response already replaced must not outlive it.
func (s *store) putCoded(pk string, base, c *object, coding string) {
	c.secondary = base.secondary
	var stored *entry
	s.c.Compute(pk, func(old *entry, found bool) (*entry, otter.ComputeOp) {
		if !found || old.variant(base.secondary) != base {
			return old, otter.CancelOp
		}
		key := codedKey(base.secondary, coding)
		stored = &entry{vary: old.vary, variants: make([]variant, 1, len(old.variants)+1)}
		stored.variants[0] = variant{key, c}
		for _, v := range old.variants {
			if v.key != key {
				stored.variants = append(stored.variants, v)
			}
		}
		stored.dropLeastUsed()
		stored.retain = stored.retention()
		return stored, otter.WriteOp
	})
	s.toDisk(pk, stored)
}

// dropLeastUsed drops the least recently used variants past maxVariants; never the first, the one
// being stored.
func (e *entry) dropLeastUsed() {
	for len(e.variants) > maxVariants {
		least := 1
		for i := 2; i < len(e.variants); i++ {
			if e.variants[i].o.used.Load() < e.variants[least].o.used.Load() {
				least = i
			}
		}
		e.variants = slices.Delete(e.variants, least, least+1)
	}
}

// retention is how long the entry stays worth keeping: as long as its longest-kept variant.
func (e *entry) retention() time.Duration {
	var d time.Duration
	for _, v := range e.variants {
		d = max(d, v.o.retention())
	}
	return d
}

// invalidate drops every variant stored for pk, in memory and on disk.
func (s *store) invalidate(pk string) bool {
	_, ok := s.c.Invalidate(pk)
	if s.disk != nil && s.disk.invalidate(pk) {
		ok = true
	}
	return ok
}

// keys are the primary keys stored, in memory or on disk; a key in both may come twice.
func (s *store) keys() iter.Seq[string] {
	return func(yield func(string) bool) {
		for pk := range s.c.Keys() {
			if !yield(pk) {
				return
			}
		}
		if s.disk == nil {
			return
		}
		for pk := range s.disk.index.Keys() {
			if !yield(pk) {
				return
			}
		}
	}
}

// retention is how long past now the object may still serve: its lifetime, its stale windows and,
// when it can be validated, time to be refreshed by a 304.
func (o *object) retention() time.Duration {
	d := o.lifetime + max(0, o.staleWhileRevalidate, o.staleIfError)
	if o.validator {
		d += keepForValidation
	}
	return max(d, time.Second)
}
