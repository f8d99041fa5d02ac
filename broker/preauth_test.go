package broker_test

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/meridian-mq/meridian/tools/testutil"
)

// partialFrameFlood opens n connections to a standalone broker; each
// (after CONNECT when connect is set) announces a frame of frameSize bytes,
// sends sent bytes of it and stalls. It returns the broker's largest RSS
// growth seen until every writer finished or gave up, and for each
// connection how long the broker took to close it (0: still open after
// hold).
func partialFrameFlood(t *testing.T, s *testutil.Standalone, n, frameSize, sent int, connect bool, hold time.Duration) (peak int64, closedAfter []time.Duration, conns []net.Conn) {
	t.Helper()
	pid := s.Pid()
	before := rssBytes(t, pid)
	var max atomic.Int64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			if g := rssBytes(t, pid) - before; g > max.Load() {
				max.Store(g)
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	conns = make([]net.Conn, n)
	for i := range conns {
		if connect {
			conns[i] = dialRaw(t, s.URL).c
		} else {
			c, err := net.DialTimeout("tcp", strings.TrimPrefix(s.URL, "pulsar://"), 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			conns[i] = c
		}
	}
	start := time.Now()
	closedAfter = make([]time.Duration, n)
	var writers, readers sync.WaitGroup
	for i, c := range conns {
		writers.Add(1)
		go func() { // the frame's size, then sent bytes of it, in 64 KiB writes
			defer writers.Done()
			b := binary.BigEndian.AppendUint32(nil, uint32(frameSize))
			c.SetWriteDeadline(time.Now().Add(hold))
			if _, err := c.Write(b); err != nil {
				return
			}
			chunk := make([]byte, 64<<10)
			for left := sent; left > 0; left -= len(chunk) {
				if _, err := c.Write(chunk[:min(left, len(chunk))]); err != nil {
					return // closed by the broker, or its reads stopped
				}
			}
		}()
		readers.Add(1)
		go func() { // until the broker closes it, or hold passes
			defer readers.Done()
			c.SetReadDeadline(start.Add(hold))
			_, err := io.Copy(io.Discard, c)
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return
			}
			closedAfter[i] = time.Since(start)
		}()
	}
	writers.Wait()
	// Let the broker take in what is already in its socket buffers.
	time.Sleep(time.Second)
	close(stop)
	<-sampled
	readers.Wait()
	return max.Load(), closedAfter, conns
}

// Issue 30, item 1: 100 connections that never CONNECT, each sending
// 4 MiB of a 5 MiB frame (the reproduction grew a broker from 65
// to 880 MB), are closed as soon as the frame's size arrives — before
// CONNECTED a frame over MaxUnauthenticatedFrameBytes (64 KiB) is refused
// unread — and the broker's resident memory stays within 100 MiB of what
// it was.
func TestPreAuthPartialFramesClosedAndBounded(t *testing.T) {
	s := standalone(t)
	roundTrip(t, s.URL) // warm up: a topic loaded, a ledger open
	peak, closed, _ := partialFrameFlood(t, s, 100, 5<<20, 4<<20, false, 20*time.Second)
	var open int
	var slowest time.Duration
	for _, d := range closed {
		if d == 0 {
			open++
		}
		slowest = max(slowest, d)
	}
	t.Logf("RSS growth at most %.1f MiB; %d of 100 connections still open after 20 s; the last closed after %v", float64(peak)/(1<<20), open, slowest.Round(time.Millisecond))
	if open > 0 || slowest > 5*time.Second {
		t.Errorf("%d connections still open, the last one closed after %v: want every one closed within 5 s", open, slowest)
	}
	if peak >= 100<<20 {
		t.Errorf("resident memory grew by %d MiB, want < 100 MiB", peak>>20)
	}
	if n := metricValue(t, s.AdminURL, "meridian_broker_limit_exceeded_total", `limit="unauthenticated_frame_size"`); n < 100 {
		t.Errorf("unauthenticated_frame_size counted %v, want >= 100", n)
	}
	roundTrip(t, s.URL) // the broker serves on
}

// Issue 30, item 1: the same flood from 100 CONNECTED connections (a
// 5 MiB frame is within their limit) is bounded by the bytes of frames
// being read over all connections (--max-buffered-frame-bytes, 32 MiB
// here): past it a connection is not read until earlier frames are read
// or their connections close. Small frames do not wait: a PING on another
// connection is answered while the budget is spent, and once the flood's
// connections close, a 1 MiB message is produced.
func TestAuthenticatedPartialFramesBounded(t *testing.T) {
	s := testutil.StartStandalone(t, t.TempDir(), "--max-buffered-frame-bytes", "33554432")
	roundTrip(t, s.URL)
	probe := dialRaw(t, s.URL)
	peak, closed, conns := partialFrameFlood(t, s, 100, 5<<20, 4<<20, true, 5*time.Second)
	t.Logf("RSS growth at most %.1f MiB", float64(peak)/(1<<20))
	for i, d := range closed {
		if d != 0 {
			t.Fatalf("connection %d closed after %v: a CONNECTED peer's slow frame is waited for", i, d)
		}
	}
	if peak >= 100<<20 {
		t.Errorf("resident memory grew by %d MiB, want < 100 MiB", peak>>20)
	}
	if n := metricValue(t, s.AdminURL, "meridian_broker_limit_exceeded_total", `limit="buffered_frame_bytes"`); n < 1 {
		t.Errorf("buffered_frame_bytes counted %v, want >= 1", n)
	}
	probe.ping() // small frames never wait for the budget
	for _, c := range conns {
		c.Close()
	}
	client := newPulsarClient(t, s.URL)
	prod, err := client.CreateProducer(pulsar.ProducerOptions{Topic: topicName(t), DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := prod.Send(ctx, &pulsar.ProducerMessage{Payload: make([]byte, 1<<20)}); err != nil {
		t.Fatalf("a 1 MiB message after the flood: %v", err)
	}
}

// Issue 30, item 1: connections not yet CONNECTED are capped over all
// clients (--max-unauthenticated-connections; CONNECTED ones do not
// count) and closed when they have not sent CONNECT within
// --handshake-timeout.
func TestUnauthenticatedConnectionCapAndHandshakeTimeout(t *testing.T) {
	s := testutil.StartStandalone(t, t.TempDir(), "--max-unauthenticated-connections", "3", "--handshake-timeout", "2s")
	addr := strings.TrimPrefix(s.URL, "pulsar://")
	var authed []*rawConn
	for range 5 { // CONNECTED: not counted
		authed = append(authed, dialRaw(t, s.URL))
	}
	silent := func() (net.Conn, chan time.Duration) {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		gone := make(chan time.Duration, 1)
		start := time.Now()
		go func() {
			c.SetReadDeadline(start.Add(20 * time.Second))
			io.Copy(io.Discard, c)
			gone <- time.Since(start)
		}()
		return c, gone
	}
	var held []chan time.Duration
	for range 3 {
		_, gone := silent()
		held = append(held, gone)
	}
	time.Sleep(200 * time.Millisecond) // the three are accepted
	_, over := silent()
	select {
	case d := <-over:
		t.Logf("a fourth un-CONNECTED connection closed after %v", d.Round(time.Millisecond))
	case <-time.After(time.Second):
		t.Fatal("a fourth connection not yet CONNECTED was not closed at accept")
	}
	for i, gone := range held {
		d := <-gone
		if d < 1500*time.Millisecond || d > 5*time.Second {
			t.Fatalf("silent connection %d closed after %v, want at the 2 s handshake timeout", i, d)
		}
	}
	if n := metricValue(t, s.AdminURL, "meridian_broker_limit_exceeded_total", `limit="unauthenticated_connections"`); n < 1 {
		t.Errorf("unauthenticated_connections counted %v", n)
	}
	if n := metricValue(t, s.AdminURL, "meridian_broker_limit_exceeded_total", `limit="handshake_timeout"`); n < 3 {
		t.Errorf("handshake_timeout counted %v, want >= 3", n)
	}
	for _, r := range authed { // CONNECTED connections outlive the timeout
		r.ping()
	}
	dialRaw(t, s.URL).ping() // the slots are free again
}
