// Package h1 holds what herd's own HTTP/1.x servers, the load balancer's fast engine and the edge's,
// share: the strict rules (RFC 9112) by which they read a client's request head (the request line,
// field lines, framing, and the lexical checks under them), and the way they hand a connection to
// net/http's server for what they do not serve themselves. Both servers refuse the same hostile
// requests (obsolete line folding, control characters, malformed targets, hosts and lengths, both
// framings at once, oversized heads) because they read them with the same code. Each server keeps
// what it does with the fields it reads.
package h1
