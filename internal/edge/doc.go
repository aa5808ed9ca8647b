// Package edge is herd's caching and coalescing HTTP front for fleets: a shared cache by the HTTP
// caching standard (RFC 9111, with stale-while-revalidate and stale-if-error from RFC 5861) between
// clients and an origin.
//
// A request is matched to a Behavior by its path (the first pattern that matches wins), which says
// which methods are allowed, how the cache key is made and how long responses are kept. The cache
// key has two parts. The primary key is the target URI (host, path, and the query when the behavior
// keys on it): everything stored for one URI lives in one entry, so that invalidating a URI after an
// unsafe method drops all its variants at once. The secondary key selects a variant within the
// entry: the values of the request headers the stored response's Vary names, and of the headers and
// cookies the behavior keys on.
//
// Entries live in memory in an otter cache bounded by bytes, so the least valuable entries are
// evicted when the bound is reached. The weigher counts what an entry costs on the heap (weight.go):
// every allocation rounded to Go's size class, maps by their slot groups, the head its hits write
// and the cache's own bookkeeping, so that the bound is one on memory, not on body bytes. A response is stored only when the
// RFC allows it (cacheable status and freshness, no no-store, no private, no Authorization unless
// the response says it may be shared), when it is no larger than the behavior's maximum object size
// and when its body arrived whole: a larger one is streamed to the client and not stored, and a
// truncated or malformed one is passed on as an error and never stored.
//
// Freshness comes from s-maxage, then max-age, then Expires, and only for heuristically cacheable
// status codes from Last-Modified (a tenth of its age, at most a day); the behavior's default TTL
// replaces the heuristic, and its minimum and maximum bound the lifetime. A stale entry is validated
// with the origin by ETag and Last-Modified; a 304 refreshes it. Within stale-while-revalidate it is
// served at once and validated in the background; within stale-if-error it is served when the origin
// fails. must-revalidate, proxy-revalidate and s-maxage forbid serving it stale at all.
//
// Concurrent misses for one primary key are coalesced (coalesce.go): one request goes to the origin
// and the others wait, up to a bound, and are then served from what it stored. When the response
// turns out not to be storable the key is marked hit-for-miss for a short time, so that later
// requests go to the origin side by side instead of queueing behind each other.
//
// Stored responses are served with an Age header, as 304 to a client's matching conditional request,
// as 206 to a Range request and without a body to HEAD, all through net/http's ServeContent.
//
// Server (server.go) serves an Edge on listeners. Its HTTP/1.x connections are served by an engine
// of herd's own that reads request heads with the load balancer's rules (package h1) and answers a
// fresh hit that nothing in the request changes straight from the stored object: the status line
// and fields made once per object, then Age, then the body, in one write. Every other GET and HEAD
// goes through the Edge as an http.Handler on the same connection; other methods, upgrades and
// HTTP/2 hand the connection to net/http's server.
package edge
