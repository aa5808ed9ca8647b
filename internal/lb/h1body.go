package lb

import (
	"bufio"
	"bytes"
	"io"
	"strconv"
	"time"

	"herd.dev/herd/internal/h1"
)

// This file relays message bodies for the fast engine: by length, chunked, or until the connection
// closes.

// readDeadline extends a target connection's deadline while a body streams in, so the response timeout
// bounds the time without progress rather than the whole body.
type readDeadline struct {
	bc *bconn
	d  time.Duration
}

func (rd *readDeadline) refresh() {
	if rd != nil {
		rd.bc.extend(time.Now(), rd.d)
	}
}

// fill makes src hold at least one byte, flushing dst first so the other side sees what came so far
// before this side blocks. It returns the error of the side that failed.
func fill(dst *bufio.Writer, src *bufio.Reader, rd *readDeadline) (rerr, werr error) {
	if src.Buffered() > 0 {
		return nil, nil
	}
	if dst.Buffered() > 0 {
		if err := dst.Flush(); err != nil {
			return nil, err
		}
	}
	rd.refresh()
	_, err := src.Peek(1)
	return err, nil
}

// relayN copies exactly n bytes.
func relayN(dst *bufio.Writer, src *bufio.Reader, n int64, rd *readDeadline) (rerr, werr error) {
	for n > 0 {
		if rerr, werr = fill(dst, src, rd); rerr != nil || werr != nil {
			if rerr == io.EOF {
				rerr = io.ErrUnexpectedEOF
			}
			return rerr, werr
		}
		b, _ := src.Peek(int(min(int64(src.Buffered()), n)))
		if _, err := dst.Write(b); err != nil {
			return nil, err
		}
		src.Discard(len(b))
		n -= int64(len(b))
	}
	return nil, nil
}

// relayAll copies until src ends.
func relayAll(dst *bufio.Writer, src *bufio.Reader, rd *readDeadline) (rerr, werr error) {
	for {
		if rerr, werr = fill(dst, src, rd); werr != nil {
			return nil, werr
		}
		if rerr == io.EOF {
			return nil, nil
		}
		if rerr != nil {
			return rerr, nil
		}
		b, _ := src.Peek(src.Buffered())
		if _, err := dst.Write(b); err != nil {
			return nil, err
		}
		src.Discard(len(b))
	}
}

var errBadChunk = badRequest("malformed chunked body")

// relayChunked copies a chunked body, re-chunked when chunked is set (trailers included), else as plain
// data. limit (when not -1) bounds the data: a request body over it is answered 413.
func relayChunked(dst *bufio.Writer, src *bufio.Reader, chunked bool, limit int64, rd *readDeadline) (rerr, werr error) {
	var raw []byte
	var total int64
	for {
		if raw, rerr, werr = chunkLine(dst, src, rd); rerr != nil || werr != nil {
			return rerr, werr
		}
		line := bytes.TrimRight(raw, "\r\n")
		if i := bytes.IndexByte(line, ';'); i >= 0 {
			line = line[:i] // chunk extensions are dropped
		}
		line = bytes.TrimRight(line, " \t")
		size, ok := parseHex(line)
		if !ok {
			return errBadChunk, nil
		}
		if total += size; limit >= 0 && total > limit {
			return &httpError{Code: 413, Why: "request body too large"}, nil
		}
		if size == 0 {
			if chunked {
				dst.WriteString("0\r\n")
			}
			// Trailer fields, then the final empty line.
			for {
				if raw, rerr, werr = chunkLine(dst, src, rd); rerr != nil || werr != nil {
					return rerr, werr
				}
				field := bytes.TrimRight(raw, "\r\n")
				if len(field) > 0 && !validField(field) {
					return errBadChunk, nil
				}
				if chunked {
					// Line endings are rewritten as CRLF: some servers wait for a CRLF CRLF that a
					// bare LF would never complete.
					dst.Write(field)
					if _, err := dst.WriteString("\r\n"); err != nil {
						return nil, err
					}
				}
				if len(field) == 0 {
					return nil, nil
				}
			}
		}
		if chunked {
			dst.WriteString(strconv.FormatInt(size, 16))
			dst.WriteString("\r\n")
		}
		if rerr, werr = relayN(dst, src, size, rd); rerr != nil || werr != nil {
			return rerr, werr
		}
		if rerr, werr = fill(dst, src, rd); rerr != nil || werr != nil {
			return eofUnexpected(rerr), werr
		}
		crlf, err := src.ReadSlice('\n')
		if err != nil || len(bytes.TrimRight(crlf, "\r\n")) != 0 || len(crlf) > 2 {
			return errBadChunk, nil
		}
		if chunked {
			if _, err := dst.WriteString("\r\n"); err != nil {
				return nil, err
			}
		}
	}
}

// chunkLine reads the next line of a chunked body (size or trailer field), line ending included.
func chunkLine(dst *bufio.Writer, src *bufio.Reader, rd *readDeadline) (line []byte, rerr, werr error) {
	if rerr, werr = fill(dst, src, rd); rerr != nil || werr != nil {
		return nil, eofUnexpected(rerr), werr
	}
	line, err := src.ReadSlice('\n')
	if err != nil {
		return nil, eofUnexpected(chunkErr(err)), nil
	}
	return line, nil, nil
}

// validField reports whether line is a well-formed "name: value" field line.
func validField(line []byte) bool {
	_, vs, ve, ok := h1.SplitField(line)
	return ok && h1.ValidValue(line[vs:ve])
}

func chunkErr(err error) error {
	if err == bufio.ErrBufferFull {
		return errBadChunk
	}
	return err
}

func eofUnexpected(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// parseHex parses a chunk size: 1 to 15 hex digits.
func parseHex(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) > 15 {
		return 0, false
	}
	var n int64
	for _, c := range b {
		switch {
		case c >= '0' && c <= '9':
			n = n<<4 | int64(c-'0')
		case c >= 'a' && c <= 'f':
			n = n<<4 | int64(c-'a'+10)
		case c >= 'A' && c <= 'F':
			n = n<<4 | int64(c-'A'+10)
		default:
			return 0, false
		}
	}
	return n, true
}
