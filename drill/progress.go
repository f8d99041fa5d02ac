package drill

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// progress shows one updating line on a terminal (plain lines every 5 s
// otherwise): phase, elapsed/total, messages acknowledged/received, the
// current fault.
type progress struct {
	w     io.Writer
	tty   bool
	total time.Duration
	name  string

	mu    sync.Mutex
	ph    string
	last  string
	start time.Time
	rec   *recorder
	stop  chan struct{}
	wg    sync.WaitGroup
}

func newProgress(w io.Writer, s *Scenario) *progress {
	p := &progress{w: w, total: s.Workload.Duration, name: s.Name}
	if f, ok := w.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			p.tty = true
		}
	}
	return p
}

func (p *progress) phase(ph string) {
	if p.w == nil {
		return
	}
	p.mu.Lock()
	p.ph = ph
	started := !p.start.IsZero()
	p.mu.Unlock()
	if !started || !p.tty {
		p.print(true)
	}
}

func (p *progress) fault(f string) {
	if p.w == nil {
		return
	}
	p.mu.Lock()
	p.last = f
	p.mu.Unlock()
	p.print(true)
}

func (p *progress) begin(start time.Time, rec *recorder) {
	if p.w == nil {
		return
	}
	p.mu.Lock()
	p.start, p.rec = start, rec
	p.stop = make(chan struct{})
	p.mu.Unlock()
	every := 5 * time.Second
	if p.tty {
		every = 250 * time.Millisecond
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-p.stop:
				return
			case <-t.C:
				p.print(false)
			}
		}
	}()
}

func (p *progress) done() {
	if p.w == nil || p.stop == nil {
		return
	}
	close(p.stop)
	p.wg.Wait()
	p.print(true)
	if p.tty {
		fmt.Fprintln(p.w)
	}
}

func (p *progress) print(newline bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	line := fmt.Sprintf("drill %s: %s", p.name, p.ph)
	if !p.start.IsZero() {
		line += fmt.Sprintf(" %s/%s", time.Since(p.start).Round(time.Second), p.total)
	}
	if p.rec != nil {
		line += fmt.Sprintf(" | acked %d, received %d, failed sends %d", p.rec.acked.Load(), p.rec.received.Load(), p.rec.failed.Load())
	}
	if p.last != "" {
		line += " | last fault: " + p.last
	}
	if p.tty {
		fmt.Fprintf(p.w, "\r\033[K%s", line)
		if newline && p.start.IsZero() {
			fmt.Fprintln(p.w)
		}
		return
	}
	fmt.Fprintln(p.w, line)
}
