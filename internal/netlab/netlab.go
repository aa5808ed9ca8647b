// Package netlab is the local provider's network lab: what makes a machine's network namespaces
// behave like regions far apart (docs/regions.md). A Lab implements regionnet.Networks: each
// region's router namespace behind the region's bridge (region.go), the internet namespace every
// router and client network is linked to (internet.go), client networks (client.go), the regional
// load balancers (regionlb.go), the front door (front.go) and chaos on a region's link
// (chaos.go). A region's (or a client network's) link to the internet is a pair of TUN devices
// with a relay process between them (`herd link-relay`, RunLinkRelay) that delays and drops
// packets as the link's Shape says, from the region's options (latency, jitter, loss).
//
// The bridge and subnet of a region belong to the instance provider, whose instances share them
// with the region's router: the lab asks for them, and takes the provider's lock, through
// Instances.
package netlab
