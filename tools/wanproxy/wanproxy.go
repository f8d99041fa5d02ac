// Package wanproxy is a user-space TCP proxy that adds WAN latency and an
// optional bandwidth limit to the connections it carries. Disaster drills put
// it in front of the gRPC replication links between regions running on one
// host, where `tc netem` is not available.
//
// Each direction of each connection has a reader goroutine and a writer
// goroutine joined by a bounded queue of chunks. The reader stamps every chunk
// with the time it was read; the writer releases the chunk at readAt + rtt/2,
// then paces it to the bandwidth limit. Because the delay is measured from the
// read time and not from the previous write, a stream of writes is delayed as
// a whole rather than serialised behind each chunk's delay: latency grows,
// throughput does not collapse. Data is never reordered or dropped.
//
// Settings are read at release time: SetRTT and SetBandwidth apply to new
// connections, to existing ones and to data already queued. Lowering the RTT
// releases queued data early (order is kept); raising it holds back data
// that was not yet written.
//
// Half-close is forwarded: when one side ends its stream (EOF), the queued
// data is delivered, then the other side's write half is closed (CloseWrite),
// so orderly gRPC/HTTP2 and HTTP/1 shutdowns work. When both directions have
// ended, or on any error, both connections are closed.
package wanproxy

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

const (
	// maxChunk is the largest chunk one read produces.
	maxChunk = 64 << 10
	// queueLen is the number of chunks queued per direction; a full queue
	// stops the reader, which back-pressures the sender through TCP.
	queueLen = 256
	// pacePieces splits a second's worth of bandwidth into this many
	// writes (10 ms each) so a limited link sends smoothly.
	pacePieces = 100
	// dialTimeout bounds dialling the target for one accepted connection.
	dialTimeout = 5 * time.Second
)

// settings is an immutable snapshot of the link parameters. changed is
// closed when a newer snapshot replaces this one, so writers sleeping on an
// old value wake and re-evaluate.
type settings struct {
	rtt     time.Duration
	bw      int64 // bytes per second per direction; 0 = unlimited
	changed chan struct{}
}

// Proxy listens on one address and forwards every connection to target.
type Proxy struct {
	ln     net.Listener
	target string
	dialer net.Dialer
	ctx    context.Context // cancelled by Close; aborts dials in progress
	cancel context.CancelFunc

	setMu sync.Mutex // serialises SetRTT/SetBandwidth
	cfg   atomic.Pointer[settings]

	conns     atomic.Int64
	bytesUp   atomic.Int64 // client -> target
	bytesDown atomic.Int64 // target -> client

	mu     sync.Mutex
	closed bool
	links  map[*link]struct{}

	wg sync.WaitGroup // every goroutine the proxy starts
}

// Start listens on listen ("127.0.0.1:PORT") and forwards to target.
// Connections are dialled lazily per accepted connection (a target that is
// down makes the accepted connection close; the proxy keeps running).
func Start(listen, target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Proxy{
		ln:     ln,
		target: target,
		dialer: net.Dialer{Timeout: dialTimeout},
		ctx:    ctx,
		cancel: cancel,
		links:  make(map[*link]struct{}),
	}
	p.cfg.Store(&settings{changed: make(chan struct{})})
	p.wg.Add(1)
	go p.acceptLoop()
	return p, nil
}

// Addr is the address the proxy listens on.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// SetRTT sets the round-trip time the proxy adds: each direction of every
// connection (existing and new) delays each chunk of bytes by rtt/2 from the
// moment it was read. 0 = no delay. Data keeps its order and is never
// dropped; pipelining is preserved. The value is read when a chunk is
// released, so it applies to data already queued too.
func (p *Proxy) SetRTT(rtt time.Duration) {
	p.update(func(s *settings) { s.rtt = max(rtt, 0) })
}

// SetBandwidth limits each direction of each connection to bytesPerSec
// (0 = unlimited), applied after the delay by pacing: a chunk is written in
// pieces of about 10 ms worth of bandwidth, each piece starting no earlier
// than the previous one's share of the budget allows. Idle time earns no
// burst credit.
func (p *Proxy) SetBandwidth(bytesPerSec int64) {
	p.update(func(s *settings) { s.bw = max(bytesPerSec, 0) })
}

func (p *Proxy) update(f func(*settings)) {
	p.setMu.Lock()
	defer p.setMu.Unlock()
	old := p.cfg.Load()
	next := &settings{rtt: old.rtt, bw: old.bw, changed: make(chan struct{})}
	f(next)
	p.cfg.Store(next)
	close(old.changed)
}

// Stats reports the connections accepted and the bytes forwarded each way
// (up: client to target; down: target to client), for reports.
func (p *Proxy) Stats() (conns int64, bytesUp, bytesDown int64) {
	return p.conns.Load(), p.bytesUp.Load(), p.bytesDown.Load()
}

// Close stops listening and closes every connection it carries. It returns
// once every goroutine of the proxy has exited. Later calls return nil.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	links := make([]*link, 0, len(p.links))
	for l := range p.links {
		links = append(links, l)
	}
	p.mu.Unlock()

	err := p.ln.Close()
	p.cancel()
	for _, l := range links {
		l.close()
	}
	p.wg.Wait()
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}

func (p *Proxy) isClosed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closed
}

func (p *Proxy) acceptLoop() {
	defer p.wg.Done()
	var backoff time.Duration
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) || p.isClosed() {
				return
			}
			// Transient (e.g. out of file descriptors): back off and retry.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			select {
			case <-time.After(backoff):
			case <-p.ctx.Done():
				return
			}
			continue
		}
		backoff = 0
		p.conns.Add(1)
		p.wg.Add(1)
		go p.serve(c)
	}
}

// link is one proxied connection: the accepted client side and the dialled
// target side.
type link struct {
	p      *Proxy
	client net.Conn
	done   chan struct{} // closed by close

	mu     sync.Mutex
	closed bool
	server net.Conn

	ended atomic.Int32 // directions that finished cleanly
	once  sync.Once
}

// track registers l so Close can reach it; false if the proxy is closed.
func (p *Proxy) track(l *link) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.links[l] = struct{}{}
	return true
}

func (p *Proxy) untrack(l *link) {
	p.mu.Lock()
	delete(p.links, l)
	p.mu.Unlock()
}

// setServer attaches the dialled target connection; false if the link was
// closed meanwhile.
func (l *link) setServer(c net.Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return false
	}
	l.server = c
	return true
}

// close closes both connections and wakes every goroutine of the link.
func (l *link) close() {
	l.once.Do(func() {
		l.mu.Lock()
		l.closed = true
		server := l.server
		l.mu.Unlock()
		close(l.done)
		l.client.Close()
		if server != nil {
			server.Close()
		}
		l.p.untrack(l)
	})
}

func (p *Proxy) serve(client net.Conn) {
	defer p.wg.Done()
	l := &link{p: p, client: client, done: make(chan struct{})}
	if !p.track(l) {
		client.Close()
		return
	}
	server, err := p.dialer.DialContext(p.ctx, "tcp", p.target)
	if err != nil {
		l.close() // target down: the accepted connection closes
		return
	}
	if !l.setServer(server) {
		server.Close()
		return
	}
	up := make(chan chunk, queueLen)
	down := make(chan chunk, queueLen)
	p.wg.Add(4)
	go l.read(client, up)
	go l.write(server, up, &p.bytesUp)
	go l.read(server, down)
	go l.write(client, down, &p.bytesDown)
}

type chunk struct {
	data   []byte
	readAt time.Time
}

// read queues what src sends. The queue is closed when src ends (EOF) or
// fails; on failure the link is closed first.
func (l *link) read(src net.Conn, q chan<- chunk) {
	defer l.p.wg.Done()
	defer close(q)
	buf := make([]byte, maxChunk)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			c := chunk{data: append([]byte(nil), buf[:n]...), readAt: time.Now()}
			select {
			case q <- c:
			case <-l.done:
				return
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				l.close()
			}
			return
		}
	}
}

// write delivers the queued chunks to dst, each at readAt + rtt/2 and paced
// to the bandwidth limit. When the queue ends cleanly it half-closes dst; the
// link closes when both directions have ended or on any error.
func (l *link) write(dst net.Conn, q <-chan chunk, counter *atomic.Int64) {
	defer l.p.wg.Done()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	var paceAt time.Time // earliest start of the next paced write
	for {
		var c chunk
		var ok bool
		select {
		case c, ok = <-q:
		case <-l.done:
			return
		}
		if !ok {
			break
		}
		// Delay: wait until readAt + rtt/2 with the current rtt.
		for {
			s := l.p.cfg.Load()
			wait := time.Until(c.readAt.Add(s.rtt / 2))
			if wait <= 0 {
				break
			}
			if !l.sleep(timer, wait, s.changed) {
				return
			}
		}
		// Bandwidth: pace the chunk in pieces.
		data := c.data
		for len(data) > 0 {
			s := l.p.cfg.Load()
			piece := data
			if s.bw > 0 {
				size := min(max(s.bw/pacePieces, 1), maxChunk)
				if int64(len(piece)) > size {
					piece = piece[:size]
				}
				now := time.Now()
				if paceAt.After(now) {
					if !l.sleep(timer, paceAt.Sub(now), s.changed) {
						return
					}
					if l.p.cfg.Load() != s {
						// Settings changed while waiting: restart the
						// pacing at the new rate from now.
						paceAt = time.Time{}
						continue
					}
				} else {
					paceAt = now
				}
				paceAt = paceAt.Add(time.Duration(int64(len(piece)) * int64(time.Second) / s.bw))
			}
			n, err := dst.Write(piece)
			counter.Add(int64(n))
			if err != nil {
				l.close()
				return
			}
			data = data[len(piece):]
		}
	}
	// The source ended (EOF) or failed. On failure the link is closed.
	select {
	case <-l.done:
		return
	default:
	}
	if cw, ok := dst.(interface{ CloseWrite() error }); ok {
		if err := cw.CloseWrite(); err != nil {
			l.close()
			return
		}
	} else {
		l.close()
		return
	}
	if l.ended.Add(1) == 2 {
		l.close()
	}
}

// sleep waits for d, a settings change, or the link closing; false if the
// link closed.
func (l *link) sleep(t *time.Timer, d time.Duration, changed <-chan struct{}) bool {
	t.Reset(d)
	select {
	case <-t.C:
		return true
	case <-changed:
		t.Stop()
		return true
	case <-l.done:
		t.Stop()
		return false
	}
}
