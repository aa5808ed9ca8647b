// Command backend is the target of herd's load-balancer benchmark: it answers every HTTP/1.x request
// with the same 1 KiB body. It is a minimal keep-alive responder rather than a net/http server so that
// the proxies in front of it, not the backends sharing the load generator's core, are what saturates.
// It reads request heads and Content-Length bodies, honours Connection: close and HTTP/1.0, and
// answers pipelined requests in order.
package main

import (
	"bufio"
	"bytes"
	"flag"
	"io"
	"log"
	"net"
	"strconv"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:18081", "address to listen on")
	size := flag.Int("size", 1024, "response body size in bytes")
	flag.Parse()
	body := make([]byte, *size)
	for i := range body {
		body[i] = 'a' + byte(i%26)
	}
	head := "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n"
	keep := append([]byte(head+"\r\n"), body...)
	closing := append([]byte(head+"Connection: close\r\n\r\n"), body...)
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	for {
		c, err := ln.Accept()
		if err != nil {
			log.Fatal(err)
		}
		go serve(c, keep, closing)
	}
}

func serve(c net.Conn, keep, closing []byte) {
	defer c.Close()
	br := bufio.NewReaderSize(c, 4096)
	bw := bufio.NewWriterSize(c, 4096)
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			return
		}
		close := bytes.HasSuffix(bytes.TrimRight(line, "\r\n"), []byte("HTTP/1.0"))
		var length int64
		for {
			h, err := br.ReadSlice('\n')
			if err != nil {
				return
			}
			h = bytes.TrimRight(h, "\r\n")
			if len(h) == 0 {
				break
			}
			name, value, _ := bytes.Cut(h, []byte(":"))
			value = bytes.TrimSpace(value)
			switch {
			case bytes.EqualFold(name, []byte("Content-Length")):
				length, _ = strconv.ParseInt(string(value), 10, 64)
			case bytes.EqualFold(name, []byte("Connection")):
				if bytes.EqualFold(value, []byte("close")) {
					close = true
				} else if bytes.EqualFold(value, []byte("keep-alive")) {
					close = false
				}
			}
		}
		if _, err := io.CopyN(io.Discard, br, length); err != nil {
			return
		}
		if close {
			bw.Write(closing)
			bw.Flush()
			return
		}
		bw.Write(keep)
		// Answer pipelined requests together, as a real server's buffered writer would.
		if br.Buffered() == 0 {
			if bw.Flush() != nil {
				return
			}
		}
	}
}
