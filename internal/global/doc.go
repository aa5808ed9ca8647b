// Package global is the home of herd's global routing: which region serves a fleet's
// spec.global hostname, and how a client gets there. It holds no code; each package under it
// does one part of one flow:
//
//	clients' side of each region        regional load balancers
//	(a probe of each region's LB)       (client RTT per network)
//	             |                                  |
//	  health: reachable or not           rtt: collected per region
//	             \                                  /
//	              \  informer: fleets, instances   /
//	               \               |              /
//	                +-----> routes: Table <------+    per hostname and region: addresses,
//	                               |                  healthy or not and why; RTT per network
//	           +-------------------+-------------------+
//	           |                   |                   |
//	    dns: herd's          route53: the same     front: the front door, one
//	    authoritative DNS    spec as Route 53      address proxying to the nearest
//	    (herd up, or alone   records, for AWS      healthy regional LB, by its own
//	    on GET /v1/routes)   (herd dns export)     checks and the kernel's RTT
//
// In: health judges from the clients' side whether each region can be reached (a partition is
// not a death); rtt gathers the round-trip times the regional load balancers measured to their
// clients' networks. Computed: routes turns the store's fleets and instances (followed through
// the shared informer, change by change) and those two into the routes table the control plane
// serves as GET /v1/routes. Out: dns answers from that table,
// route53 writes a fleet's spec as the Route 53 objects that do the same job on AWS,
// route53sync keeps a hosted zone's records in step with the table (herd up --route53-zone), and front
// configures the front door (the same fleets, one target group per region) whose load balancer
// sends each request to the nearest region its own health checks find healthy.
package global
