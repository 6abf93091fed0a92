// Command delayrelay is a TCP relay that delays every byte by a fixed one-way latency in each
// direction (a round trip of twice -delay), for measuring how the edge behaves with a client or
// an origin far away without tc/netem (perf/coldedge.sh: DELAY_MS).
//
//	delayrelay -listen 127.0.0.1:7000 -to 127.0.0.1:8000 -delay 25ms
//
// Each direction of each connection is a reader that stamps what it reads and a writer that
// writes it once the stamp is -delay old. The relay terminates TCP on both sides, so it adds
// latency, not a bandwidth limit: throughput is bounded by -inflight bytes per direction
// (bandwidth × delay must fit). Closing one side closes the other after the delayed bytes.
package main

import (
	"flag"
	"log"
	"net"
	"sync"
	"time"
)

type piece struct {
	b  []byte
	at time.Time
	// eof: the reader ended; the writer closes its side after the bytes before it.
	eof bool
}

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "address to listen on")
	to := flag.String("to", "", "address to relay to")
	delay := flag.Duration("delay", 25*time.Millisecond, "one-way delay added in each direction")
	inflight := flag.Int("inflight", 64<<20, "bytes in flight per direction before the reader waits")
	flag.Parse()
	if *to == "" {
		log.Fatal("delayrelay: -to is required")
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatal(err)
	}
	log.Printf("delayrelay: %s -> %s, %s each way", ln.Addr(), *to, *delay)
	for {
		c, err := ln.Accept()
		if err != nil {
			log.Fatal(err)
		}
		go func() {
			d, err := net.DialTimeout("tcp", *to, 10*time.Second)
			if err != nil {
				log.Printf("delayrelay: dial %s: %v", *to, err)
				c.Close()
				return
			}
			var wg sync.WaitGroup
			wg.Add(2)
			go func() { defer wg.Done(); pump(c, d, *delay, *inflight) }()
			go func() { defer wg.Done(); pump(d, c, *delay, *inflight) }()
			wg.Wait()
			c.Close()
			d.Close()
		}()
	}
}

// pump copies src to dst, each byte delay after it was read.
func pump(src, dst net.Conn, delay time.Duration, inflight int) {
	const readSize = 64 << 10
	q := make(chan piece, max(inflight/readSize, 1))
	stop := make(chan struct{})
	defer close(stop)
	send := func(p piece) bool {
		select {
		case q <- p:
			return true
		case <-stop:
			return false
		}
	}
	go func() {
		for {
			b := make([]byte, readSize)
			n, err := src.Read(b)
			if n > 0 && !send(piece{b: b[:n], at: time.Now()}) {
				return
			}
			if err != nil {
				send(piece{at: time.Now(), eof: true})
				return
			}
		}
	}()
	for p := range q {
		if w := time.Until(p.at.Add(delay)); w > 0 {
			time.Sleep(w)
		}
		if p.eof {
			if tc, ok := dst.(*net.TCPConn); ok {
				tc.CloseWrite()
			} else {
				dst.Close()
			}
			return
		}
		if _, err := dst.Write(p.b); err != nil {
			src.Close() // ends the reader
			dst.Close()
			return
		}
	}
}
