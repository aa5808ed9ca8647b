// Claims make the refusal of a listener port or a hostname two fleets want hold under concurrent
// applies. listenerClashes and hostnameClashes compare an apply with the fleets it read; two
// applies of different fleets that read before either wrote would each find the port free. So
// every apply also writes, in the same Txn as its fleets, a claim record per port and hostname its
// fleets hold, conditional on the claim's version it read before it listed the fleets: of two
// such applies, the second to commit fails with a conflict, reads again, and meets the first
// fleet in the clash check.
//
// A claim only serializes the applies that want one key; who holds it is the fleets' business.
// So a claim left naming a fleet that no longer holds it (herd up stopped between writes of an
// older version) is harmless: the next apply that wants it overwrites it.

package apiserver

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/store"
)

// claimValue is what a claim record holds: the fleet that took it, for `herd` users reading the
// store and for the cleanup when the fleet goes.
type claimValue struct {
	Fleet string `json:"fleet"`
}

// claimNames returns the claims a fleet's spec takes: one per load-balancer port, one for its
// global hostname, one for its discovery name.
func claimNames(f *v1alpha1.Fleet) []string {
	var names []string
	for _, l := range f.Spec.Listeners {
		names = append(names, "port-"+strconv.Itoa(int(l.Port)))
	}
	for _, u := range []uniqueName{globalHostname, discoveryName} {
		if n := u.claimName(f); n != "" {
			names = append(names, n)
		}
	}
	return names
}

// storedClaims are the claim records as read, by name, with the fleet each names.
type storedClaims map[string]storedClaim

type storedClaim struct {
	fleet string
	rv    int64
}

// readClaims reads every claim. Read them before the fleets: a claim written after this read
// makes the apply's Txn conflict, and one written before it came with a fleet the apply then sees.
func readClaims(ctx context.Context, st store.Store) (storedClaims, error) {
	recs, _, err := st.List(ctx, store.Claims)
	if err != nil {
		return nil, err
	}
	out := make(storedClaims, len(recs))
	for _, r := range recs {
		var v claimValue
		if err := json.Unmarshal(r.Value, &v); err != nil {
			return nil, fmt.Errorf("decode %s/%s: %w", r.Kind, r.Name, err)
		}
		out[r.Name] = storedClaim{fleet: v.Fleet, rv: r.ResourceVersion}
	}
	return out, nil
}

// ops returns the writes that take every claim of the written fleets (created, or updated
// conditional on the version read) and give up those the written fleets held and hold no more
// (deleted conditional on it): one op per claim.
func (c storedClaims) ops(written []*v1alpha1.Fleet) ([]store.Op, error) {
	want := map[string]string{} // claim -> fleet
	names := map[string]bool{}
	var order []string
	for _, f := range written {
		names[f.Metadata.Name] = true
		for _, n := range claimNames(f) {
			want[n] = f.Metadata.Name
			order = append(order, n)
		}
	}
	var ops []store.Op
	for _, n := range order {
		value, err := json.Marshal(claimValue{Fleet: want[n]})
		if err != nil {
			return nil, err
		}
		op := store.Op{Type: store.OpCreate, Kind: store.Claims, Name: n, Value: value}
		if cur, ok := c[n]; ok {
			op.Type, op.ResourceVersion = store.OpUpdate, cur.rv
		}
		ops = append(ops, op)
	}
	return append(ops, c.release(names, want)...), nil
}

// release returns the deletes of the claims that name one of fleets and are not in keep, each
// conditional on the version read.
func (c storedClaims) release(fleets map[string]bool, keep map[string]string) []store.Op {
	var ops []store.Op
	for n, cur := range c {
		if _, kept := keep[n]; !kept && fleets[cur.fleet] {
			ops = append(ops, store.Op{Type: store.OpDelete, Kind: store.Claims, Name: n, ResourceVersion: cur.rv})
		}
	}
	return ops
}

// deleteFleetAndClaims deletes a fleet and the claims it holds in one Txn, reading again when an
// apply changed either meanwhile.
func (s *Server) deleteFleetAndClaims(ctx context.Context, name string) error {
	for attempt := 1; ; attempt++ {
		claims, err := readClaims(ctx, s.opts.Store)
		if err != nil {
			return err
		}
		rec, err := s.opts.Store.Get(ctx, store.Fleets, name)
		if err != nil {
			return err
		}
		ops := append([]store.Op{{Type: store.OpDelete, Kind: store.Fleets, Name: name, ResourceVersion: rec.ResourceVersion}},
			claims.release(map[string]bool{name: true}, nil)...)
		_, err = s.opts.Store.Txn(ctx, ops...)
		if store.IsOpError(err) && attempt < 5 {
			continue
		}
		return err
	}
}
