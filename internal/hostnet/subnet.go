package hostnet

import (
	"fmt"
	"net"
	"net/netip"
	"sort"
)

// SubnetBits is the prefix length of the subnets herd takes for its networks: a region's, the
// lab's internet, a client network's.
const SubnetBits = 24

// PickSubnet returns the first /24 of pool that overlaps none of taken (another network of the
// data directory) and none of hostAddrs (an address in use on the host: another data
// directory's bridge, a LAN).
func PickSubnet(pool netip.Prefix, taken []netip.Prefix, hostAddrs []netip.Prefix) (netip.Prefix, error) {
	pool = pool.Masked()
	if !pool.Addr().Is4() || pool.Bits() > SubnetBits {
		return netip.Prefix{}, fmt.Errorf("subnet pool %s must be an IPv4 prefix of /%d or shorter", pool, SubnetBits)
	}
	n := 1 << (SubnetBits - pool.Bits())
	base := pool.Addr().As4()
	for i := range n {
		a := base
		v := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])
		v += uint32(i) << (32 - SubnetBits)
		cand := netip.PrefixFrom(netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}), SubnetBits)
		if Overlaps(cand, taken) || Overlaps(cand, hostAddrs) {
			continue
		}
		return cand, nil
	}
	return netip.Prefix{}, fmt.Errorf("no free /%d left in the subnet pool %s (every one is used by a region or by an address on this host)", SubnetBits, pool)
}

// Overlaps reports whether p overlaps any prefix of list.
func Overlaps(p netip.Prefix, list []netip.Prefix) bool {
	for _, q := range list {
		if p.Overlaps(q) {
			return true
		}
	}
	return false
}

// HostAddr returns address number host of the /24 subnet.
func HostAddr(subnet netip.Prefix, host int) netip.Addr {
	a := subnet.Masked().Addr().As4()
	a[3] = byte(host)
	return netip.AddrFrom4(a)
}

// HostPrefixes returns every IPv4 address prefix configured on this host's interfaces, except
// on the interfaces listed in ignore (a data directory's own bridges).
func HostPrefixes(ignore map[string]bool) ([]netip.Prefix, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, fmt.Errorf("list host interfaces: %w", err)
	}
	var out []netip.Prefix
	for _, ifc := range ifs {
		if ignore[ifc.Name] {
			continue
		}
		addrs, err := ifc.Addrs()
		if err != nil {
			return nil, fmt.Errorf("addresses of %s: %w", ifc.Name, err)
		}
		for _, a := range addrs {
			ipn, ok := a.(*net.IPNet)
			if !ok || ipn.IP.To4() == nil {
				continue
			}
			addr, _ := netip.AddrFromSlice(ipn.IP.To4())
			ones, _ := ipn.Mask.Size()
			if ones == 0 {
				continue
			}
			out = append(out, netip.PrefixFrom(addr, ones).Masked())
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out, nil
}
