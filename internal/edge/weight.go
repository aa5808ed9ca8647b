package edge

import (
	"slices"
	"sync"
	"unsafe"
)

// This file weighs what the memory tier holds in bytes of heap, as Go lays it out: each allocation
// rounded up to its size class, and the cache's own bookkeeping per entry. The weight is the bound's
// only view of the heap, so what it leaves out is memory the bound does not hold
// (TestWeightCoversMemory checks it against the heap).

// sizeClasses are the sizes Go's allocator rounds small allocations up to, in ascending order.
// They are read from the allocator itself, as the capacities append gives, so that they stay right
// whatever Go version builds herd.
var sizeClasses = sync.OnceValue(func() []int {
	var classes []int
	for n := 1; n <= maxSmallAlloc; {
		c := cap(append([]byte(nil), make([]byte, n)...))
		classes = append(classes, c)
		n = c + 1
	}
	return classes
})

// maxSmallAlloc is the largest allocation Go rounds to a size class; larger ones take whole pages.
const (
	maxSmallAlloc = 32 << 10
	pageSize      = 8 << 10
)

// allocSize is what an allocation of n bytes takes from the heap.
func allocSize(n int) int {
	if n <= 0 {
		return 0
	}
	if n > maxSmallAlloc {
		return (n + pageSize - 1) / pageSize * pageSize
	}
	classes := sizeClasses()
	i, _ := slices.BinarySearch(classes, n)
	return classes[min(i, len(classes)-1)]
}

// floorAlloc is the largest allocation of at most n bytes that the allocator does not round up.
func floorAlloc(n int) int {
	if n > maxSmallAlloc {
		return n / pageSize * pageSize
	}
	classes := sizeClasses()
	i, found := slices.BinarySearch(classes, n)
	if found {
		return n
	}
	if i == 0 {
		return 0
	}
	return classes[i-1]
}

// size is what the object costs the memory tier: its fields and body, in two allocations at most,
// its secondary key, and itself.
func (o *object) size() int {
	return allocSize(cap(o.data)) + allocSize(cap(o.tail)) + allocSize(len(o.secondary)) +
		allocSize(int(unsafe.Sizeof(object{})))
}

// entryOverhead is what the cache spends per entry beside the entry itself: otter's node, its slot
// in otter's table and its frequency sketch, measured at about 130 bytes, and some room for what the
// sizes above leave out.
const entryOverhead = 160

// weight is what an entry at key costs the memory tier: the key, the entry, its variants and the
// cache's own bookkeeping.
func (e *entry) weight(key string) int {
	n := entryOverhead + allocSize(len(key)) + allocSize(int(unsafe.Sizeof(entry{})))
	n += allocSize(cap(e.variants) * int(unsafe.Sizeof(variant{})))
	for _, v := range e.variants {
		n += allocSize(len(v.key)) + v.o.size()
	}
	if len(e.vary) > 0 {
		n += allocSize(len(e.vary) * int(unsafe.Sizeof("")))
	}
	return n
}
