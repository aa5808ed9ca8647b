// Package netlab is the local provider's network lab: what makes a machine's network namespaces
// behave like regions far apart. So far it holds the shaped links: a region's (or a client
// network's) link to the lab's internet is a pair of TUN devices with a relay process between them
// (`herd link-relay`, RunLinkRelay) that delays and drops packets as the link's Shape says, from
// the region's options (latency, jitter, loss). The regions' networks themselves, the internet
// namespace, the regional load balancers and the front door are still made by the local provider
// (internal/provider/local), which implements regionnet.Networks with them.
package netlab
