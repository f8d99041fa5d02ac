package wanproxy

import (
	"bytes"
	"crypto/rand"
	"io"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"
)

// server is a test target on 127.0.0.1 running handle for every connection.
type server struct {
	ln net.Listener
	wg sync.WaitGroup
}

func startServer(t *testing.T, addr string, handle func(net.Conn)) *server {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	s := &server{ln: ln}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				defer c.Close()
				handle(c)
			}()
		}
	}()
	t.Cleanup(s.close)
	return s
}

func (s *server) addr() string { return s.ln.Addr().String() }

// close stops the listener and waits for the handlers, which end when their
// connections do.
func (s *server) close() {
	s.ln.Close()
	s.wg.Wait()
}

// echo copies everything back, then half-closes.
func echo(c net.Conn) {
	io.Copy(c, c)
	c.(*net.TCPConn).CloseWrite()
}

func startProxy(t *testing.T, target string) *Proxy {
	t.Helper()
	p, err := Start("127.0.0.1:0", target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// roundTrip sends a small request and waits for its echo.
func roundTrip(t *testing.T, c net.Conn) time.Duration {
	t.Helper()
	msg := []byte("ping-0123456789")
	got := make([]byte, len(msg))
	c.SetDeadline(time.Now().Add(5 * time.Second))
	start := time.Now()
	if _, err := c.Write(msg); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatal(err)
	}
	d := time.Since(start)
	if !bytes.Equal(got, msg) {
		t.Fatalf("echo %q, want %q", got, msg)
	}
	return d
}

func TestRTT(t *testing.T) {
	s := startServer(t, "127.0.0.1:0", echo)
	p := startProxy(t, s.addr())
	c := dial(t, p.Addr())

	roundTrip(t, c) // warm up the connection (lazy dial)
	p.SetRTT(100 * time.Millisecond)
	for range 3 {
		if d := roundTrip(t, c); d < 100*time.Millisecond || d >= 300*time.Millisecond {
			t.Fatalf("round trip with RTT 100ms took %v, want [100ms, 300ms)", d)
		}
	}
	// Applies to an existing connection, both ways.
	p.SetRTT(0)
	for range 3 {
		if d := roundTrip(t, c); d >= 50*time.Millisecond {
			t.Fatalf("round trip with RTT 0 took %v, want < 50ms", d)
		}
	}
	// And to a new one.
	p.SetRTT(100 * time.Millisecond)
	c2 := dial(t, p.Addr())
	if d := roundTrip(t, c2); d < 100*time.Millisecond || d >= 300*time.Millisecond {
		t.Fatalf("first round trip on a new connection took %v, want [100ms, 300ms)", d)
	}

	// The counters move just after each write, so the client can read the
	// last reply an instant before the count includes it.
	waitStats(t, p, 2, 8*15, 8*15)
}

func waitStats(t *testing.T, p *Proxy, conns, up, down int64) {
	t.Helper()
	deadline := time.Now().Add(time.Second)
	for {
		c, u, d := p.Stats()
		if c == conns && u == up && d == down {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("Stats() = %d, %d, %d; want %d, %d, %d", c, u, d, conns, up, down)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestPipelining(t *testing.T) {
	s := startServer(t, "127.0.0.1:0", echo)
	p := startProxy(t, s.addr())
	p.SetRTT(100 * time.Millisecond)
	c := dial(t, p.Addr())
	c.SetDeadline(time.Now().Add(10 * time.Second))

	const n, size = 50, 64
	start := time.Now()
	errc := make(chan error, 1)
	go func() {
		for i := range n {
			msg := bytes.Repeat([]byte{byte(i)}, size)
			if _, err := c.Write(msg); err != nil {
				errc <- err
				return
			}
			time.Sleep(time.Millisecond) // separate writes, separate chunks
		}
		errc <- nil
	}()
	got := make([]byte, size)
	for i := range n {
		if _, err := io.ReadFull(c, got); err != nil {
			t.Fatal(err)
		}
		if want := bytes.Repeat([]byte{byte(i)}, size); !bytes.Equal(got, want) {
			t.Fatalf("reply %d = %v, want %v", i, got[:4], want[:4])
		}
	}
	d := time.Since(start)
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if d < 100*time.Millisecond || d >= 1500*time.Millisecond {
		t.Fatalf("%d pipelined round trips with RTT 100ms took %v, want [100ms, 1.5s)", n, d)
	}
	t.Logf("%d pipelined round trips: %v", n, d)
}

func TestIntegrity(t *testing.T) {
	s := startServer(t, "127.0.0.1:0", echo)
	p := startProxy(t, s.addr())
	p.SetRTT(20 * time.Millisecond)
	c := dial(t, p.Addr())
	c.SetDeadline(time.Now().Add(10 * time.Second))

	data := make([]byte, 8<<20)
	rand.Read(data)
	errc := make(chan error, 1)
	go func() {
		_, err := c.Write(data)
		if err == nil {
			// Half-close: the echo server sees EOF through the proxy and
			// half-closes back, so ReadAll below ends.
			err = c.(*net.TCPConn).CloseWrite()
		}
		errc <- err
	}()
	got, err := io.ReadAll(c)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data) {
		t.Fatalf("echoed %d bytes differ from the %d sent", len(got), len(data))
	}
	waitStats(t, p, 1, int64(len(data)), int64(len(data)))
}

func TestBandwidth(t *testing.T) {
	const total = 512 << 10
	received := make(chan time.Time, 1)
	s := startServer(t, "127.0.0.1:0", func(c net.Conn) {
		n, _ := io.Copy(io.Discard, c)
		if n == total {
			received <- time.Now()
		}
	})
	p := startProxy(t, s.addr())
	p.SetBandwidth(1 << 20)
	c := dial(t, p.Addr())

	start := time.Now()
	if _, err := c.Write(make([]byte, total)); err != nil {
		t.Fatal(err)
	}
	c.(*net.TCPConn).CloseWrite()
	select {
	case at := <-received:
		d := at.Sub(start)
		if d < 400*time.Millisecond || d > 3*time.Second {
			t.Fatalf("512 KiB at 1 MiB/s took %v, want about 0.5s", d)
		}
		t.Logf("512 KiB at 1 MiB/s: %v", d)
	case <-time.After(5 * time.Second):
		t.Fatal("target did not receive 512 KiB")
	}
}

// freeAddr returns a 127.0.0.1 address nothing listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

func TestTargetDown(t *testing.T) {
	target := freeAddr(t)
	p := startProxy(t, target)

	c := dial(t, p.Addr())
	c.SetDeadline(time.Now().Add(2 * time.Second))
	start := time.Now()
	if n, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatalf("read %d bytes from a proxy whose target is down", n)
	} else if d := time.Since(start); d > time.Second {
		t.Fatalf("connection closed after %v (%v), want promptly", d, err)
	}

	startServer(t, target, echo)
	c2 := dial(t, p.Addr())
	roundTrip(t, c2)
	waitStats(t, p, 2, 15, 15)
}

func TestHalfClose(t *testing.T) {
	// The target reads the whole request, then answers and closes: an
	// HTTP/1.0-style exchange that needs the client's half-close forwarded.
	s := startServer(t, "127.0.0.1:0", func(c net.Conn) {
		req, _ := io.ReadAll(c)
		c.Write(append([]byte("got:"), req...))
	})
	p := startProxy(t, s.addr())
	p.SetRTT(20 * time.Millisecond)
	c := dial(t, p.Addr())
	c.SetDeadline(time.Now().Add(5 * time.Second))
	c.Write([]byte("request"))
	c.(*net.TCPConn).CloseWrite()
	got, err := io.ReadAll(c)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != "got:request" {
		t.Fatalf("reply %q, want %q", got, "got:request")
	}
	// Both directions ended: the proxy drops the link by itself.
	deadline := time.Now().Add(time.Second)
	for {
		p.mu.Lock()
		n := len(p.links)
		p.mu.Unlock()
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d links still open after both sides ended", n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// SetRTT applies to data already queued: lowering it releases held data.
func TestSetRTTQueued(t *testing.T) {
	s := startServer(t, "127.0.0.1:0", echo)
	p := startProxy(t, s.addr())
	c := dial(t, p.Addr())
	roundTrip(t, c)
	p.SetRTT(10 * time.Second)
	go func() {
		time.Sleep(50 * time.Millisecond)
		p.SetRTT(0)
	}()
	if d := roundTrip(t, c); d >= time.Second {
		t.Fatalf("round trip took %v after lowering the RTT from 10s to 0", d)
	}
}

func TestClose(t *testing.T) {
	s := startServer(t, "127.0.0.1:0", echo)
	base := runtime.NumGoroutine()

	p, err := Start("127.0.0.1:0", s.addr())
	if err != nil {
		t.Fatal(err)
	}
	p.SetRTT(200 * time.Millisecond)
	c := dial(t, p.Addr())
	c2 := dial(t, p.Addr())
	// c carries data in flight (queued in the proxy) when Close comes.
	c.Write([]byte("in flight"))
	time.Sleep(20 * time.Millisecond)

	start := time.Now()
	if err := p.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("Close took %v", d)
	}
	for _, conn := range []net.Conn{c, c2} {
		conn.SetDeadline(time.Now().Add(2 * time.Second))
		start := time.Now()
		var err error
		for err == nil {
			_, err = conn.Read(make([]byte, 64))
		}
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Fatalf("read after Close: %v", err)
		}
		if d := time.Since(start); d > time.Second {
			t.Fatalf("read returned %v after %v, want promptly", err, d)
		}
	}
	if c, err := net.DialTimeout("tcp", p.Addr(), time.Second); err == nil {
		c.Close()
		t.Fatal("proxy still accepts connections after Close")
	}
	if err := p.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}

	// No goroutine leaks: the proxy's are gone once Close returns; the echo
	// handlers end once the proxy has closed their connections.
	c.Close()
	c2.Close()
	deadline := time.Now().Add(2 * time.Second)
	for runtime.NumGoroutine() > base {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines after Close, %d before:\n%s",
				runtime.NumGoroutine(), base, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}
