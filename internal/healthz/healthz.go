// Package healthz answers a prober: /healthz (the process is alive and
// its loops are turning), /readyz (it may be sent traffic) and Pulsar's
// /status.html (what a load balancer in front of Pulsar brokers polls).
//
// A loop proves it turns by calling the func Loop returned once per turn;
// a loop that has not turned within its bound makes /healthz red, so a
// process that answers HTTP while its work is wedged is not healthy.
// Readiness is a list of named checks run on each request, each bounded
// by a timeout; Drain makes the process not ready for good (a broker
// stopping reports not-ready before it hands its bundles over).
//
// The answers need no credentials, so they say nothing beyond the name of
// the first failing check: "ok", or "not ready: NAME" / "not live: NAME"
// with status 503. The package imports nothing of the module.
package healthz

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// CheckTimeout bounds one readiness or liveness check.
const CheckTimeout = 2 * time.Second

// Checker holds a process's loops and checks. Safe for concurrent use.
type Checker struct {
	now func() time.Time

	mu    sync.Mutex
	loops []*loop
	live  []check
	ready []check
	drain atomic.Pointer[string]
}

type loop struct {
	name  string
	bound time.Duration
	last  atomic.Int64 // unix nanos of the last turn
}

type check struct {
	name string
	run  func(context.Context) error
}

// New returns an empty Checker: live and ready until told otherwise.
func New() *Checker { return &Checker{now: time.Now} }

// Loop registers a loop that must turn at least once every bound and
// returns the func it calls on each turn. It counts as turned now.
func (c *Checker) Loop(name string, bound time.Duration) func() {
	l := &loop{name: name, bound: bound}
	l.last.Store(c.now().UnixNano())
	c.mu.Lock()
	c.loops = append(c.loops, l)
	c.mu.Unlock()
	return func() { l.last.Store(c.now().UnixNano()) }
}

// Live adds a liveness check (beyond the loops): keep these to what a
// restart would cure.
func (c *Checker) Live(name string, run func(context.Context) error) {
	c.mu.Lock()
	c.live = append(c.live, check{name, run})
	c.mu.Unlock()
}

// Ready adds a readiness check, run in the order added.
func (c *Checker) Ready(name string, run func(context.Context) error) {
	c.mu.Lock()
	c.ready = append(c.ready, check{name, run})
	c.mu.Unlock()
}

// Drain makes the process not ready from now on, for reason (e.g.
// "stopping"), and /status.html answer 404.
func (c *Checker) Drain(reason string) { c.drain.Store(&reason) }

// Draining reports whether Drain was called.
func (c *Checker) Draining() bool { return c.drain.Load() != nil }

// Healthy returns nil, or an error naming the first loop that has not
// turned within its bound or the first failing liveness check.
func (c *Checker) Healthy(ctx context.Context) error {
	c.mu.Lock()
	loops, live := slices.Clone(c.loops), slices.Clone(c.live)
	c.mu.Unlock()
	now := c.now().UnixNano()
	for _, l := range loops {
		if d := time.Duration(now - l.last.Load()); d > l.bound {
			return &failed{name: l.name, err: fmt.Errorf("no turn for %s", d.Round(time.Millisecond))}
		}
	}
	return runChecks(ctx, live)
}

// IsReady returns nil, or an error naming why the process is not ready:
// it drains, it is not healthy, or the first failing readiness check.
func (c *Checker) IsReady(ctx context.Context) error {
	if r := c.drain.Load(); r != nil {
		return &failed{name: *r, err: errors.New("draining")}
	}
	if err := c.Healthy(ctx); err != nil {
		return err
	}
	c.mu.Lock()
	ready := slices.Clone(c.ready)
	c.mu.Unlock()
	return runChecks(ctx, ready)
}

func runChecks(ctx context.Context, cs []check) error {
	for _, ch := range cs {
		cctx, cancel := context.WithTimeout(ctx, CheckTimeout)
		err := ch.run(cctx)
		cancel()
		if err != nil {
			return &failed{name: ch.name, err: err}
		}
	}
	return nil
}

// failed is a check's failure: its name is what a prober is told, the
// cause what the process logs.
type failed struct {
	name string
	err  error
}

func (f *failed) Error() string { return f.name + ": " + f.err.Error() }
func (f *failed) Unwrap() error { return f.err }

// publicReason is what an unauthenticated prober may read of err: the
// failing check's or loop's name.
func publicReason(err error) string {
	var f *failed
	if errors.As(err, &f) {
		return f.name
	}
	return "unknown"
}

// Register serves GET /healthz, /readyz and /status.html on mux. logf, if
// set, is told the full cause of each failure (rate-limit it: a prober
// calls often).
func (c *Checker) Register(mux *http.ServeMux, logf func(endpoint string, err error)) {
	answer := func(endpoint, prefix string, probe func(context.Context) error) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.Header().Set("Cache-Control", "no-store")
			if err := probe(r.Context()); err != nil {
				if logf != nil {
					logf(endpoint, err)
				}
				w.WriteHeader(http.StatusServiceUnavailable)
				fmt.Fprintf(w, "%s: %s\n", prefix, publicReason(err))
				return
			}
			fmt.Fprintln(w, "ok")
		}
	}
	mux.HandleFunc("GET /healthz", answer("/healthz", "not live", c.Healthy))
	mux.HandleFunc("GET /readyz", answer("/readyz", "not ready", c.IsReady))
	// Pulsar's status page: 200 "OK" while the broker takes traffic, 404
	// once it is taken out of rotation.
	mux.HandleFunc("GET /status.html", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if c.Draining() {
			http.Error(w, "Not Found", http.StatusNotFound)
			return
		}
		fmt.Fprint(w, "OK")
	})
}
