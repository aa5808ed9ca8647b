package h1

import (
	"bufio"
	"bytes"
	"strconv"
)

// Error is a request a server refuses, with the status to answer.
type Error struct {
	Code int
	Why  string
}

func (e *Error) Error() string { return strconv.Itoa(e.Code) + " " + e.Why }

// BadRequest is a 400 for why.
func BadRequest(why string) *Error { return &Error{Code: 400, Why: why} }

// ErrHeadTooLarge is the answer to a request head over the server's limit.
var ErrHeadTooLarge = &Error{Code: 431, Why: "request header too large"}

// ReadLine appends the next line of br to *raw and returns its bounds in *raw without the line
// ending. Lines longer than br's buffer are assembled; when *raw would grow past limit bytes it
// returns tooLarge.
func ReadLine(br *bufio.Reader, raw *[]byte, limit int, tooLarge error) (start, end int, err error) {
	start = len(*raw)
	for {
		frag, err := br.ReadSlice('\n')
		if len(*raw)+len(frag) > limit {
			return 0, 0, tooLarge
		}
		*raw = append(*raw, frag...)
		if err == nil {
			break
		}
		if err != bufio.ErrBufferFull {
			return 0, 0, err
		}
	}
	end = len(*raw) - 1
	if end > start && (*raw)[end-1] == '\r' {
		end--
	}
	return start, end, nil
}

// RequestLine is a parsed request line, by offsets into the line.
type RequestLine struct {
	MethodEnd, TargetStart, TargetEnd int
	Minor                             int  // HTTP/1.minor
	H2Preface                         bool // "PRI * HTTP/2.0": the start of HTTP/2 with prior knowledge
}

// ParseRequestLine checks a request line ("GET /x HTTP/1.1").
func ParseRequestLine(line []byte) (RequestLine, error) {
	sp1 := bytes.IndexByte(line, ' ')
	sp2 := bytes.LastIndexByte(line, ' ')
	if sp1 <= 0 || sp2 <= sp1+1 {
		return RequestLine{}, BadRequest("malformed request line")
	}
	method, target, version := line[:sp1], line[sp1+1:sp2], line[sp2+1:]
	if !IsToken(method) {
		return RequestLine{}, BadRequest("malformed method")
	}
	inQuery := false
	for i, c := range target {
		inQuery = inQuery || c == '?'
		if c <= ' ' || c == 0x7f || (c == '%' && !inQuery && !(i+2 < len(target) && IsHex(target[i+1]) && IsHex(target[i+2]))) {
			// A malformed percent-encoding in the path is refused as net/http refuses it, so that
			// herd's servers, net/http and the targets behind them read the same path.
			return RequestLine{}, BadRequest("malformed request target")
		}
	}
	rl := RequestLine{MethodEnd: sp1, TargetStart: sp1 + 1, TargetEnd: sp2}
	switch string(version) {
	case "HTTP/1.1":
		rl.Minor = 1
	case "HTTP/1.0":
		rl.Minor = 0
	case "HTTP/2.0":
		if string(method) == "PRI" && string(target) == "*" {
			return RequestLine{H2Preface: true}, nil
		}
		return RequestLine{}, &Error{Code: 505, Why: "HTTP version not supported"}
	default:
		if bytes.HasPrefix(version, []byte("HTTP/")) {
			return RequestLine{}, &Error{Code: 505, Why: "HTTP version not supported"}
		}
		return RequestLine{}, BadRequest("malformed HTTP version")
	}
	return rl, nil
}

// CheckField checks one field line of a request head and returns the bounds of its name (line[:colon])
// and of its value, trimmed (line[vs:ve]).
func CheckField(line []byte) (colon, vs, ve int, err error) {
	if len(line) > 0 && (line[0] == ' ' || line[0] == '\t') {
		return 0, 0, 0, BadRequest("obsolete line folding")
	}
	colon, vs, ve, ok := SplitField(line)
	if !ok {
		return 0, 0, 0, BadRequest("malformed header line")
	}
	if !ValidValue(line[vs:ve]) {
		return 0, 0, 0, BadRequest("control character in header value")
	}
	return colon, vs, ve, nil
}

// CheckHost checks a Host field's value: a target routing by Host must see the one the server
// checked, and net/http refuses these too.
func CheckHost(value []byte) error {
	if !ValidHost(value) {
		return BadRequest("malformed Host header")
	}
	return nil
}

// Framing is what a request head's fields say about its host and body, checked as a whole by Check.
type Framing struct {
	Minor         int
	Hosts         int
	ContentLength int64 // -1 when absent
	Chunked       bool
}

// Field notes a Content-Length or Transfer-Encoding field (name, value); it reports whether the
// field was one of them.
func (f *Framing) Field(name, value []byte) (bool, error) {
	switch {
	case EqFold(name, "content-length"):
		if f.ContentLength >= 0 {
			return true, BadRequest("more than one Content-Length")
		}
		n, ok := ParseLength(value)
		if !ok {
			return true, BadRequest("malformed Content-Length")
		}
		f.ContentLength = n
		return true, nil
	case EqFold(name, "transfer-encoding"):
		if f.Chunked || !EqFold(value, "chunked") {
			return true, &Error{Code: 501, Why: "unsupported Transfer-Encoding"}
		}
		f.Chunked = true
		return true, nil
	}
	return false, nil
}

// Check validates the framing of the whole head; maxBody bounds a declared length.
func (f *Framing) Check(maxBody int64) error {
	switch {
	case f.Minor == 1 && f.Hosts == 0:
		return BadRequest("missing Host header")
	case f.Hosts > 1:
		return BadRequest("more than one Host header")
	case f.Chunked && f.ContentLength >= 0:
		// Both framings at once is how requests are smuggled past proxies: refuse it.
		return BadRequest("both Content-Length and Transfer-Encoding")
	case f.Chunked && f.Minor == 0:
		return BadRequest("Transfer-Encoding in HTTP/1.0")
	case f.ContentLength > maxBody:
		return &Error{Code: 413, Why: "request body too large"}
	}
	return nil
}

// HasBody reports whether the request carries a body.
func (f *Framing) HasBody() bool { return f.Chunked || f.ContentLength > 0 }

// Connection is what Connection fields say, in a request or a response.
type Connection struct {
	Close        bool
	KeepAlive    bool // HTTP/1.0 "Connection: keep-alive"
	UpgradeAsked bool // "upgrade" among the tokens
}

// Parse notes the tokens of one Connection field value; other, when not nil, is called with the
// bounds in value of each other token: the name of a field that is hop-by-hop too.
func (c *Connection) Parse(value []byte, other func(a, b int)) {
	for i := 0; i < len(value); {
		var a, b int
		a, b, i = CommaToken(value, i)
		switch tok := value[a:b]; {
		case len(tok) == 0:
		case EqFold(tok, "close"):
			c.Close = true
		case EqFold(tok, "keep-alive"):
			c.KeepAlive = true
		case EqFold(tok, "upgrade"):
			c.UpgradeAsked = true
		case other != nil:
			other(a, b)
		}
	}
}
