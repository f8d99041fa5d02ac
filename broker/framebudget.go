package broker

import (
	"net"
	"sync"

	"github.com/meridian-mq/meridian/broker/codec"
)

// budgetFreeFrameBytes: frames of at most this size do not draw on the
// frame budget (Config.MaxBufferedFrameBytes). One at a time per
// connection they are part of a connection's fixed cost (bounded by the
// connection limits), and PINGs, acks, flow permits and CONNECTs keep
// moving while the budget is spent.
const budgetFreeFrameBytes = 64 << 10

// frameBudget bounds the bytes of frames being read, summed over all of a
// broker's connections (issue 30, item 1: 100 connections each holding
// most of a 5 MiB frame grew a broker by 815 MB). A frame's size is
// reserved before the Decoder allocates for it and released once it has
// been read; a reader whose frame does not fit waits, first come first
// served, without reading (TCP back-pressure on its client), until earlier
// frames are read or their connections close.
type frameBudget struct {
	size   int64
	onWait func() // called once per wait (a metric)

	mu      sync.Mutex
	used    int64
	waiters []*budgetWaiter // FIFO
}

type budgetWaiter struct {
	n     int64
	ready chan struct{} // closed when granted (n added to used)
}

func newFrameBudget(size int, onWait func()) *frameBudget {
	return &frameBudget{size: int64(size), onWait: onWait}
}

// acquire reserves n bytes, waiting while they do not fit; it gives up
// with net.ErrClosed when cancel closes.
func (b *frameBudget) acquire(n int, cancel <-chan struct{}) error {
	if n <= budgetFreeFrameBytes {
		return nil
	}
	b.mu.Lock()
	if len(b.waiters) == 0 && b.used+int64(n) <= b.size {
		b.used += int64(n)
		b.mu.Unlock()
		return nil
	}
	w := &budgetWaiter{n: int64(n), ready: make(chan struct{})}
	b.waiters = append(b.waiters, w)
	b.mu.Unlock()
	if b.onWait != nil {
		b.onWait()
	}
	select {
	case <-w.ready:
		return nil
	case <-cancel:
	}
	b.mu.Lock()
	select {
	case <-w.ready: // granted meanwhile: hand it on
		b.used -= w.n
	default:
		for i, o := range b.waiters {
			if o == w {
				b.waiters = append(b.waiters[:i], b.waiters[i+1:]...)
				break
			}
		}
	}
	b.grantLocked() // the waiter gone may have held back the next ones
	b.mu.Unlock()
	return net.ErrClosed
}

// release gives back n bytes acquired.
func (b *frameBudget) release(n int) {
	if n <= budgetFreeFrameBytes {
		return
	}
	b.mu.Lock()
	b.used -= int64(n)
	b.grantLocked()
	b.mu.Unlock()
}

// grantLocked admits waiters in order while the first fits.
func (b *frameBudget) grantLocked() {
	for len(b.waiters) > 0 && b.used+b.waiters[0].n <= b.size {
		w := b.waiters[0]
		b.waiters[0] = nil
		b.waiters = b.waiters[1:]
		b.used += w.n
		close(w.ready)
	}
}

// inUse returns the bytes reserved (tests).
func (b *frameBudget) inUse() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

// waiting returns the readers waiting (tests).
func (b *frameBudget) waiting() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.waiters)
}

// connBudget is one connection's codec.Budget over its broker's
// frameBudget: a wait ends when the connection closes.
type connBudget struct {
	b      *frameBudget
	closed <-chan struct{}
}

var _ codec.Budget = connBudget{}

func (c connBudget) Acquire(n int) error { return c.b.acquire(n, c.closed) }
func (c connBudget) Release(n int)       { c.b.release(n) }
