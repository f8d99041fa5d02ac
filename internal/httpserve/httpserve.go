// Package httpserve builds every HTTP server of Meridian's processes — the
// broker's admin API with /metrics and the health views, the bookies' and
// auto-recovery's /metrics, `meridian up`'s control listener, the pprof
// listener — so that none is left with a timeout or a connection cap
// missing (issue 30: the admin server had only ReadHeaderTimeout, and a
// body trickled at 1 B/s or an idle keep-alive held a connection 75 s and
// more, with no cap on connections).
//
// A caller:
//
//  1. New(handler, Options{...}); the zero Options are DefaultOptions.
//  2. Serve(listener) on a goroutine; the listener may be a TLS one
//     (tls.NewListener): the cap counts the connections it accepts, TLS
//     handshakes included, and the server still sees each *tls.Conn.
//  3. Close (or Shutdown) when done; Serve then returns
//     http.ErrServerClosed.
package httpserve

import (
	"context"
	"log"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/meridian-mq/meridian/internal/ratelog"
)

// Options are an HTTP server's limits. For each field 0 means its default
// (DefaultOptions) and a negative value no limit (for MaxHeaderBytes:
// net/http's 1 MiB).
type Options struct {
	// ReadHeaderTimeout bounds reading a request's headers, from the
	// connection's accept (TLS handshake included) or the end of the
	// previous request. Default 10s: headers fit a packet or two from any
	// real client.
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds reading a whole request, headers and body. A body
	// that is not in by then fails the request and closes the connection.
	// Default 30s: the admin API's largest body (1 MiB) arrives in it at
	// 35 KB/s; one trickled at 1 B/s holds the connection 30 s, not for
	// as long as it trickles.
	ReadTimeout time.Duration
	// WriteTimeout bounds the time from the end of a request's headers to
	// the end of its response: the handler's work and the writing. It
	// must outlast the longest call. Default 60s: twice the admin API's
	// per-call deadline (30 s; a gossip key step takes at most 20 s), and
	// far beyond a /metrics scrape (a broker with 10,000 topics writes a
	// few MB; Prometheus gives up after its 10 s scrape timeout).
	WriteTimeout time.Duration
	// IdleTimeout bounds how long a keep-alive connection waits for its
	// next request. Default 30s: Prometheus' 15 s scrape interval keeps its
	// connection; a client that comes back less often reconnects, one
	// handshake per visit.
	IdleTimeout time.Duration
	// MaxConns bounds the connections open at once. Past it the listener
	// accepts no more (they wait in the kernel's accept queue) until one
	// closes, which the timeouts above bound. Default 256: the admin API's
	// clients are operators, tools, Prometheus and the region's other
	// brokers; each connection costs a goroutine and 8 KiB of buffers.
	MaxConns int
	// MaxHeaderBytes bounds a request's headers. Default 64 KiB: a 16 KiB
	// bearer token fits four times (net/http's own default is 1 MiB).
	MaxHeaderBytes int
	// Logger receives net/http's own errors (TLS handshake failures,
	// accept errors), which a remote peer can trigger at will: at most one
	// line per kind every ratelog.DefaultEvery. Default slog.Default().
	Logger *slog.Logger
}

// DefaultOptions are the defaults of every field, with the reasons beside
// them on Options.
func DefaultOptions() Options {
	return Options{
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      60 * time.Second,
		IdleTimeout:       30 * time.Second,
		MaxConns:          256,
		MaxHeaderBytes:    64 << 10,
	}
}

// WithDefaults fills the zero fields with DefaultOptions'.
func (o Options) WithDefaults() Options {
	d := DefaultOptions()
	pick := func(v *time.Duration, def time.Duration) {
		if *v == 0 {
			*v = def
		}
	}
	pick(&o.ReadHeaderTimeout, d.ReadHeaderTimeout)
	pick(&o.ReadTimeout, d.ReadTimeout)
	pick(&o.WriteTimeout, d.WriteTimeout)
	pick(&o.IdleTimeout, d.IdleTimeout)
	if o.MaxConns == 0 {
		o.MaxConns = d.MaxConns
	}
	if o.MaxHeaderBytes == 0 {
		o.MaxHeaderBytes = d.MaxHeaderBytes
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o
}

// Server is an http.Server built from Options, whose listeners are capped
// at MaxConns connections.
type Server struct {
	srv  *http.Server
	opts Options
	sem  chan struct{} // one token per open connection; nil: no cap
}

// New returns a server of handler under o (zero fields: the defaults).
func New(handler http.Handler, o Options) *Server {
	o = o.WithDefaults()
	s := &Server{opts: o}
	if o.MaxConns > 0 {
		s.sem = make(chan struct{}, o.MaxConns)
	}
	// net/http treats a negative timeout as none, as Options do.
	s.srv = &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: o.ReadHeaderTimeout,
		ReadTimeout:       o.ReadTimeout,
		WriteTimeout:      o.WriteTimeout,
		IdleTimeout:       o.IdleTimeout,
		MaxHeaderBytes:    max(o.MaxHeaderBytes, 0),
		ErrorLog:          log.New(&errorLog{r: ratelog.New(o.Logger, 0)}, "", 0),
		ConnState:         s.connState,
	}
	return s
}

// Options returns the server's options, defaults filled in.
func (s *Server) Options() Options { return s.opts }

// Serve accepts connections from l and serves them until Close; it
// returns http.ErrServerClosed after Close. While MaxConns connections are
// open, it accepts none.
func (s *Server) Serve(l net.Listener) error {
	if s.sem != nil {
		l = &limitListener{Listener: l, sem: s.sem, done: make(chan struct{})}
	}
	return s.srv.Serve(l)
}

// Close closes the listeners and every connection at once.
func (s *Server) Close() error { return s.srv.Close() }

// Shutdown closes the listeners, waits for the requests in progress, then
// closes the connections (see http.Server.Shutdown).
func (s *Server) Shutdown(ctx context.Context) error { return s.srv.Shutdown(ctx) }

// connState gives a connection's token back when it ends. Every
// connection the server accepted ends in StateClosed or StateHijacked,
// once.
func (s *Server) connState(_ net.Conn, st http.ConnState) {
	if s.sem != nil && (st == http.StateClosed || st == http.StateHijacked) {
		<-s.sem
	}
}

// limitListener takes a token before each accept (connState returns it).
// It hands out the accepted connection itself, not a wrapper, so that
// net/http sees a *tls.Conn when l is a TLS listener (netutil's
// LimitListener wraps it, and https would lose r.TLS).
type limitListener struct {
	net.Listener
	sem       chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

func (l *limitListener) Accept() (net.Conn, error) {
	select {
	case l.sem <- struct{}{}:
	case <-l.done:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.sem
		return nil, err
	}
	return c, nil
}

func (l *limitListener) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return l.Listener.Close()
}

// errorLog writes net/http's log lines through a rate limiter, keyed by
// the line's kind: its text before " from " (which names the peer), e.g.
// "http: TLS handshake error".
type errorLog struct{ r *ratelog.Logger }

func (e *errorLog) Write(p []byte) (int, error) {
	line := strings.TrimSpace(string(p))
	key, _, _ := strings.Cut(line, " from ")
	if len(key) > 80 {
		key = key[:80]
	}
	e.r.Log(slog.LevelWarn, key, "http server", "err", line)
	return len(p), nil
}
