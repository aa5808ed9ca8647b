package edge

import (
	"bytes"
	"io"
	"net/http"
	"testing"
	"time"
)

// An object's body comes back whole whatever its length, whether it is stored in one part or two,
// read whole, written, or read from any offset; and two parts never cost more than one would.
func TestObjectBodyInParts(t *testing.T) {
	now := time.Now()
	src := make([]byte, 70000)
	for i := range src {
		src[i] = byte(i * 7)
	}
	parts := 0
	for n := 0; n < len(src); n += 1 + n/50 {
		body := src[:n]
		o := newObject(200, http.Header{"Cache-Control": {"max-age=60"}, "Content-Type": {"text/plain"}}, body, now, now, time.Minute)
		if len(o.tail) > 0 {
			parts++
		}
		if whole := int(o.bodyStart) + n; allocSize(len(o.data))+allocSize(len(o.tail)) > allocSize(whole) {
			t.Fatalf("%d bytes: parts of %d and %d cost more than one of %d", n, len(o.data), len(o.tail), whole)
		}
		if !bytes.Equal(o.body(), body) || o.bodyLen() != n {
			t.Fatalf("%d bytes: body() gives %d bytes, not the body", n, len(o.body()))
		}
		var w bytes.Buffer
		if _, err := o.writeBody(&w); err != nil || !bytes.Equal(w.Bytes(), body) {
			t.Fatalf("%d bytes: writeBody wrote %d bytes, not the body (%v)", n, w.Len(), err)
		}
		r := o.bodyReader()
		for _, off := range []int{0, n / 3, len(o.data) - int(o.bodyStart) - 1, n - 1} {
			if off < 0 || off >= n {
				continue
			}
			if _, err := r.Seek(int64(off), io.SeekStart); err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(r)
			if err != nil || !bytes.Equal(got, body[off:]) {
				t.Fatalf("%d bytes: read from %d gives %d bytes, not the rest of the body (%v)", n, off, len(got), err)
			}
		}
	}
	if parts == 0 {
		t.Fatal("no object was stored in two parts")
	}
}
