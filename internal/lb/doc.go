// Package lb is herd's data plane: a load balancer that serves each fleet listener (HTTP/1.1 with
// keep-alive, h2c, h2 over TLS, WebSocket upgrades, or plain TCP) from target groups, one per fleet
// revision, weighted against each other.
//
// A target gets traffic only while it is healthy: active checks probe it every interval, and passive
// checks eject it at once when its connection is refused or reset, or after consecutive 5xx answers,
// with a doubling backoff. A request that could not connect, or an idempotent one whose connection broke
// before any response byte, is retried once on another target, within a retry budget. Targets removed by
// Apply drain: they finish what they have in flight, up to a deadline.
//
// Two engines read and write HTTP: herd's own HTTP/1.1 one (h1*.go), the hot path for HTTP/1.x
// clients, in cleartext or over TLS, of listeners with HTTP/1.1 targets, and net/http's server and
// transport (proxy.go) for the rest (HTTP/2 clients, h2c targets). They
// share one proxy core (core.go): picking, holding, retries, sticky sessions, hop-by-hop rules and
// statistics. A target connection that holds or receives bytes beyond its answers is closed, never
// reused, so that a misbehaving target cannot answer another client's request.
//
// The whole desired state is a Config, applied atomically with (*LB).Apply: in process by the
// controller, or over the admin API (NewAdminHandler) when the load balancer runs alone as `herd lb`.
// Counters per fleet, group and target are read in process with (*LB).Metrics and exported to
// Prometheus with (*LB).Collector.
//
// The data plane never depends on the control plane: if nothing calls Apply again, the last config keeps
// serving.
package lb
