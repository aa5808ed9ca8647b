// Package fnvmix is the fixed, unseeded 64-bit hashing herd spreads keys with: FNV-1a, then the
// SplitMix64 finalizer so that similar keys land far apart. Fixed, because every process must
// agree (every herd DNS server sends a client network to the same region); written out, because
// the load balancer hashes a header per request and hash/fnv's hasher allocates.
package fnvmix

// FNV1a is 64-bit FNV-1a of s.
func FNV1a[T string | []byte](s T) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}

// Mix64 is the SplitMix64 finalizer: it spreads similar inputs over the whole range.
func Mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
