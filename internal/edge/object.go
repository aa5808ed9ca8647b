package edge

import (
	"bytes"
	"io"
	"iter"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// object is one stored response: what the origin sent, less the hop-by-hop fields, and the times
// that its age is computed from (RFC 9111 section 4.2.3).
//
// Its fields and body are held as the bytes a hit writes, data then tail: the fields in wire form
// ("Name: value\r\n", sorted by name, as http.Header writes them), then the fields a hit adds
// (X-Cache, Content-Length, Accept-Ranges, a sniffed Content-Type), the blank line, and the body. A
// hit on the engine writes its status line and Age, then data and tail whole; the rest of the edge
// parses the fields when it needs them (a miss's answer, revalidation, Vary, 304 merging). Kept as a
// map of strings, the fields and a prebuilt head for hits cost some 900 bytes more per object than
// the bytes themselves, which a memory tier bounded by bytes pays for in objects it cannot hold.
//
// tail, when there is one, is most of the body in one allocation the size of one of Go's size
// classes, and data the rest: one allocation of the whole would be rounded up to the next class,
// some 460 bytes on average for the bench's objects, where data's rounding is some 35 (split).
type object struct {
	data      []byte
	tail      []byte
	fieldsEnd int32 // data[:fieldsEnd] are the stored fields
	bodyStart int32 // data[bodyStart:] is the body
	status    int32

	// What the edge reads of the stored Cache-Control, worked out once: whether it says no-cache,
	// whether it forbids serving stale (forbidsStale), and its stale-while-revalidate and
	// stale-if-error windows (RFC 5861), -1 when absent.
	noCache, forbidsStale bool
	staleWhileRevalidate  time.Duration
	staleIfError          time.Duration

	validator    bool // it has an ETag or a Last-Modified, so a 304 can refresh it
	compressible bool // the edge may serve it compressed (compressible)
	hasDate      bool // the origin sent a Date, so that none is added
	sniffed      bool // Content-Type was sniffed: a HEAD, which net/http does not sniff, goes the slow way

	responseTime time.Time // when its response arrived
	lifetime     time.Duration
	// initialAge is its age when it arrived (RFC 9111 section 4.2.3's corrected_initial_age):
	// worked out once, when it is made, not again for every hit.
	initialAge time.Duration
	secondary  string // the variant key it was stored under
	// used is when it was stored or last served among other variants of its entry, by useClock:
	// which variant goes when an entry has too many (maxVariants).
	used atomic.Int64
}

// useClock orders the uses of stored variants.
var useClock atomic.Int64

// notStored are the fields an object does not keep: its Age, which every answer sets from its own
// times, and those every answer from it sets anew.
var notStored = map[string]bool{"Age": true, "X-Cache": true, "Content-Length": true}

// notStored200 are those of a 200, which every answer gives Accept-Ranges: bytes.
var notStored200 = map[string]bool{"Age": true, "X-Cache": true, "Content-Length": true, "Accept-Ranges": true}

// newObject makes a stored response from what the origin sent and when: header and body are read
// here, not kept.
func newObject(status int, header http.Header, body []byte, requestTime, responseTime time.Time, lifetime time.Duration) *object {
	cc := parseCacheControl(header)
	o := &object{status: int32(status), responseTime: responseTime, lifetime: lifetime,
		noCache: cc.has("no-cache"), forbidsStale: forbidsStale(cc),
		staleWhileRevalidate: -1, staleIfError: -1,
		validator:    header.Get("ETag") != "" || header.Get("Last-Modified") != "",
		compressible: compressible(status, header, len(body), cc)}
	if w, ok := cc.seconds("stale-while-revalidate"); ok {
		o.staleWhileRevalidate = w
	}
	if w, ok := cc.seconds("stale-if-error"); ok {
		o.staleIfError = w
	}
	var ageValue time.Duration
	if v := header.Get("Age"); v != "" {
		if n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil && n >= 0 && n < maxDeltaSeconds {
			ageValue = time.Duration(n) * time.Second
		}
	}
	apparent := time.Duration(0)
	if date, ok := httpDate(header.Get("Date")); ok {
		apparent = max(0, responseTime.Sub(date))
	}
	o.initialAge = max(apparent, ageValue+responseTime.Sub(requestTime))

	var head bytes.Buffer
	head.Grow(512)
	skip := notStored
	if status == http.StatusOK {
		skip = notStored200
	}
	header.WriteSubset(&head, skip)
	o.fieldsEnd = int32(head.Len())
	_, o.hasDate = header["Date"]
	head.WriteString("X-Cache: Hit\r\nContent-Length: ")
	head.WriteString(strconv.Itoa(len(body)))
	head.WriteString("\r\n")
	if status == http.StatusOK {
		head.WriteString("Accept-Ranges: bytes\r\n")
	}
	if _, ok := header["Content-Type"]; !ok && len(body) > 0 && header.Get("Transfer-Encoding") == "" {
		// As net/http names a missing Content-Type when it serves the body.
		head.WriteString("Content-Type: ")
		head.WriteString(http.DetectContentType(body[:min(len(body), 512)]))
		head.WriteString("\r\n")
		o.sniffed = true
	}
	head.WriteString("\r\n")
	o.bodyStart = int32(head.Len())
	n := head.Len() + len(body)
	at := split(n, head.Len())
	o.data = make([]byte, at)
	copy(o.data, head.Bytes())
	copy(o.data[o.bodyStart:], body)
	if at < n {
		o.tail = make([]byte, n-at)
		copy(o.tail, body[at-head.Len():])
	}
	o.used.Store(useClock.Add(1))
	return o
}

// split is where an object of n bytes, the first head of them its fields, is cut into data and
// tail: so that tail is the largest allocation of the body that is not rounded up, when data's
// rounding is then less than the whole's; else n, no tail. data, the fields and the start of the
// body, is then short enough that a hit copies it with the status line, and tail is written as it is:
// one slice of each in the write, as without a tail.
func split(n, head int) int {
	at := n - floorAlloc(n-head)
	if at == n || allocSize(at)-at >= allocSize(n)-n {
		return n
	}
	return at
}

// body is the stored body, in one slice: made of its two parts when it has two.
func (o *object) body() []byte {
	if len(o.tail) == 0 {
		return o.data[o.bodyStart:]
	}
	return slices.Concat(o.data[o.bodyStart:], o.tail)
}

// bodyLen is the stored body's length.
func (o *object) bodyLen() int { return len(o.data) - int(o.bodyStart) + len(o.tail) }

// writeBody writes the stored body to w.
func (o *object) writeBody(w io.Writer) (int, error) {
	n, err := w.Write(o.data[o.bodyStart:])
	if err != nil || len(o.tail) == 0 {
		return n, err
	}
	m, err := w.Write(o.tail)
	return n + m, err
}

// bodyReader reads the stored body, as http.ServeContent does.
func (o *object) bodyReader() io.ReadSeeker {
	return io.NewSectionReader(twoParts{o.data[o.bodyStart:], o.tail}, 0, int64(o.bodyLen()))
}

// twoParts reads two slices as one.
type twoParts struct{ a, b []byte }

func (p twoParts) ReadAt(dst []byte, off int64) (int, error) {
	n := 0
	if off < int64(len(p.a)) {
		n = copy(dst, p.a[off:])
	}
	if off += int64(n) - int64(len(p.a)); n < len(dst) && off < int64(len(p.b)) {
		n += copy(dst[n:], p.b[off:])
	}
	if n < len(dst) {
		return n, io.EOF
	}
	return n, nil
}

// fields yields the stored fields' names and values in the order stored, names sorted; a name with
// several values comes once for each, in order. Names and values are parts of one string.
func (o *object) fields() iter.Seq2[string, string] {
	return func(yield func(string, string) bool) {
		for line := range strings.Lines(string(o.data[:o.fieldsEnd])) {
			name, value, _ := strings.Cut(strings.TrimSuffix(line, "\r\n"), ": ")
			if !yield(name, value) {
				return
			}
		}
	}
}

// header returns the stored fields, as a header of their own.
func (o *object) header() http.Header {
	h := http.Header{}
	o.setFields(h)
	return h
}

// setFields sets the stored fields in h, replacing the values h has under the same names.
func (o *object) setFields(h http.Header) {
	prev := ""
	for name, value := range o.fields() {
		if name == prev {
			h[name] = append(h[name], value)
			continue
		}
		h[name] = []string{value}
		prev = name
	}
}

// field returns the first value of the stored field name, or "".
func (o *object) field(name string) string {
	name = http.CanonicalHeaderKey(name)
	for n, value := range o.fields() {
		if n == name {
			return value
		}
	}
	return ""
}

// age is the object's current age at now (RFC 9111 section 4.2.3).
func (o *object) age(now time.Time) time.Duration {
	return o.initialAge + now.Sub(o.responseTime)
}

// requestTime is when the request that fetched the object may be taken to have been sent: as long
// before its response as its initial age, which gives the same age again when the object is made
// anew from its stored fields, which have no Age.
func (o *object) requestTime() time.Time {
	return o.responseTime.Add(-o.initialAge)
}
