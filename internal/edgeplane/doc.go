// Package edgeplane runs edge locations: a Location serves one Distribution (internal/edge's cache)
// on the Distribution's listeners, and is reconfigured in place when the Distribution changes, so
// that what it has stored survives the change. A Set, which herd up runs, keeps one Location per
// Distribution in the store: it lists and watches the store, starts a Location for a Distribution
// applied, reconfigures it when the Distribution or a fleet it sends misses to changes, and stops
// it when the Distribution is deleted.
//
// Invalidations go through the store too (kind edgeinvalidations): `herd edge invalidate` writes
// one record, and every Set that serves the Distribution (every herd up replica) drops the matching
// objects when its watch delivers it. The replica that took the request answers once its own Set
// has done so, which the watch makes a matter of milliseconds.
package edgeplane
