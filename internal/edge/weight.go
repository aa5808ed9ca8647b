package edge

import (
	"math/bits"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"unsafe"
)

// This file weighs what the memory tier holds in bytes of heap, as Go lays it out: each allocation
// rounded up to its size class, maps by their groups of slots, and the cache's own bookkeeping per
// entry. The weight is the bound's only view of the heap, so what it leaves out is memory the bound
// does not hold (TestWeightCoversMemory checks it against the heap).

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

// mapSize is what a map of n entries of slot bytes (key and value) takes: its header, and its
// groups of 8 slots with their control word, sized as make(map, n) sizes them (at most 7 of 8 slots
// used), in tables of at most 1,024 slots.
func mapSize(n, slot int) int {
	const header, groupSlots, table, tableSlots = 48, 8, 48, 1024
	group := 8 + groupSlots*slot
	if n <= groupSlots {
		return header + allocSize(group)
	}
	capacity := 1 << bits.Len(uint((n*groupSlots+6)/7-1))
	tables := max(1, capacity/tableSlots)
	return header + allocSize(8*tables) + tables*(allocSize(table)+allocSize(capacity/tables/groupSlots*group))
}

// headerSize is what a stored http.Header takes: the map, one array of all its values' string
// headers (as Header.Clone makes it), and each name and value.
func headerSize(h http.Header) int {
	n, values := mapSize(len(h), int(unsafe.Sizeof("")+unsafe.Sizeof([]string(nil)))), 0
	for k, vs := range h {
		n += allocSize(len(k))
		for _, v := range vs {
			n += allocSize(len(v))
		}
		values += len(vs)
	}
	return n + allocSize(values*int(unsafe.Sizeof("")))
}

// headSize is what an object's hit head (hitHead) takes: its struct and its buffer.
func headSize(o *object) int {
	return allocSize(int(unsafe.Sizeof(hitHead{}))) + allocSize(headRoom(o))
}

// headRoom is the buffer hitHead makes for the head: the status line, the object's fields and those
// the head adds (X-Cache, Content-Length, Accept-Ranges, a sniffed Content-Type). Made this size
// from the start, the buffer is not grown past what the weight counts.
func headRoom(o *object) int {
	n := len("HTTP/1.1 200 \r\n") + len(http.StatusText(o.status)) +
		len("X-Cache: Hit\r\n") + len("Content-Length: \r\n") + len(strconv.Itoa(len(o.body)))
	if o.status == http.StatusOK {
		n += len("Accept-Ranges: bytes\r\n")
	}
	if _, ok := o.header["Content-Type"]; !ok {
		n += len("Content-Type: \r\n") + 48 // what http.DetectContentType names is shorter
	}
	for k, vs := range o.header {
		if k == "Age" {
			continue
		}
		for _, v := range vs {
			n += len(k) + len(": \r\n") + len(v)
		}
	}
	return n
}

// size is what the object costs the memory tier: its body as allocated, its fields, its parsed
// Cache-Control, the head its hits write (counted before the first hit makes it), and itself.
func (o *object) size() int {
	n := allocSize(cap(o.body)) + headerSize(o.header) + headSize(o) + allocSize(int(unsafe.Sizeof(object{})))
	// The directives' names and values are substrings of the Cache-Control field's value, except a
	// name that was not lowercase: counted all the same.
	n += allocSize(cap(o.cc) * int(unsafe.Sizeof(directive{})))
	for _, d := range o.cc {
		n += allocSize(len(d.name))
	}
	return n + allocSize(len(o.secondary))
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
