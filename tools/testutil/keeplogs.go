package testutil

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// KeepLogsEnv names the environment variable that keeps every process's
// whole log: with MERIDIAN_TEST_KEEP_LOGS=DIR, each test's processes'
// logs (every start of each, goroutine dumps included) are copied to
// DIR/<TestName>/ when the test ends, whether it passed or not.
const KeepLogsEnv = "MERIDIAN_TEST_KEEP_LOGS"

// What the processes a test started leave behind when it fails or runs
// out of time (every helper that starts processes goes through StartProc:
// StartRegion, AddBookie, AddBroker, StartStandalone, ...):
//
//   - The test failed: before the first of them is killed at cleanup,
//     every one still running gets SIGQUIT — a Go process prints all its
//     goroutines to its stderr, which is its log — and exits. Then the
//     tail of each log (the lines before the dump) is printed with the
//     test's output, with where the dump is.
//   - The test binary is about to time out (go test -timeout panics the
//     binary; cleanups do not run): a watchdog started with the test's
//     first process fires shortly before t.Deadline(), sends SIGQUIT to
//     every process of the test still running, keeps the logs (with
//     MERIDIAN_TEST_KEEP_LOGS) and prints the tails and the dumps on the
//     binary's stderr, which go test shows.
//   - With MERIDIAN_TEST_KEEP_LOGS=DIR, every log is copied to
//     DIR/<TestName>/ at cleanup (and by the watchdog).

// procSet is the processes one test started.
type procSet struct {
	t     testing.TB
	mu    sync.Mutex
	procs []*Proc
	// dumpOnce: the goroutine dumps are taken once per test; a second
	// caller waits until they are.
	dumpOnce sync.Once
	// stop ends the watchdog; watchdogDone is closed when it returned.
	stop         chan struct{}
	watchdogDone chan struct{}
	kept         string // the directory the logs were kept in, once
}

var (
	setsMu sync.Mutex
	sets   = map[testing.TB]*procSet{}

	// watchdogMargin: how long before the test binary's deadline the
	// watchdog dumps (at most a quarter of the time left when the test
	// started its first process). Dumping, waiting for the processes to
	// exit and copying the logs take a few seconds on a loaded machine.
	watchdogMargin = 20 * time.Second
	// watchdogOut is where the watchdog writes (go test prints the test
	// binary's stderr even when the binary panics).
	watchdogOut io.Writer = os.Stderr
	// quitWait bounds the wait for a process to print its goroutines and
	// exit after SIGQUIT.
	quitWait = 10 * time.Second
)

// setFor returns t's process set, making it (and its cleanup and
// watchdog) at t's first process.
func setFor(t testing.TB) *procSet {
	setsMu.Lock()
	defer setsMu.Unlock()
	if s := sets[t]; s != nil {
		return s
	}
	s := &procSet{t: t, stop: make(chan struct{}), watchdogDone: make(chan struct{})}
	sets[t] = s
	// Registered before any process's own cleanup, so it runs after them
	// all (cleanups run last-in first-out): every process is dead by then.
	t.Cleanup(s.finish)
	if d, ok := t.(interface{ Deadline() (time.Time, bool) }); ok {
		if deadline, ok := d.Deadline(); ok {
			go s.watchdog(deadline)
			return s
		}
	}
	close(s.watchdogDone)
	return s
}

func (s *procSet) add(p *Proc) {
	s.mu.Lock()
	s.procs = append(s.procs, p)
	s.mu.Unlock()
}

func (s *procSet) list() []*Proc {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*Proc(nil), s.procs...)
}

// beforeKill runs in each process's cleanup, before it is killed: when the
// test failed, the first one to run takes the goroutine dumps of every
// process of the test still running.
func (s *procSet) beforeKill() {
	if s.t.Failed() {
		s.dumpGoroutines()
	}
}

// dumpGoroutines sends SIGQUIT to every process of the test still running
// (SIGCONT first, for a stopped one) and waits until each printed its
// goroutines and exited. Once per test: a concurrent caller (a process's
// cleanup while the watchdog dumps) returns when the dumps are taken.
func (s *procSet) dumpGoroutines() {
	s.dumpOnce.Do(func() {
		var wg sync.WaitGroup
		for _, p := range s.list() {
			wg.Go(func() { p.quitDump(quitWait) })
		}
		wg.Wait()
	})
}

// finish is the test's last process cleanup: every process is dead. On
// failure it prints the logs' tails; with MERIDIAN_TEST_KEEP_LOGS it keeps
// the logs.
func (s *procSet) finish() {
	close(s.stop)
	<-s.watchdogDone
	if s.t.Failed() {
		s.dumpGoroutines() // a no-op unless a process was started after the others' cleanups
		for _, p := range s.list() {
			s.t.Log(p.tail(60))
		}
	}
	if dir := os.Getenv(KeepLogsEnv); dir != "" {
		if kept, err := s.keep(dir); err != nil {
			s.t.Logf("keep logs: %v", err)
		} else {
			s.t.Logf("logs kept in %s", kept)
		}
	}
	setsMu.Lock()
	delete(sets, s.t)
	setsMu.Unlock()
}

// keep copies every log of every process of the test to dir/<TestName>/.
func (s *procSet) keep(dir string) (string, error) {
	dst := filepath.Join(dir, strings.ReplaceAll(s.t.Name(), "/", "_"))
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return "", err
	}
	used := map[string]bool{}
	var errs []string
	for _, p := range s.list() {
		for i, src := range p.logFiles() {
			name := p.Name
			if i > 0 {
				name = fmt.Sprintf("%s.start%d", p.Name, i+1) // after a Restart
			}
			base := name
			for n := 2; used[name]; n++ {
				name = fmt.Sprintf("%s-%d", base, n) // two processes of one name
			}
			used[name] = true
			if err := copyFile(src, filepath.Join(dst, name+".log")); err != nil {
				errs = append(errs, err.Error())
			}
		}
	}
	s.mu.Lock()
	s.kept = dst
	s.mu.Unlock()
	if len(errs) > 0 {
		return dst, fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return dst, nil
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// watchdogAt returns when the watchdog fires for a test binary deadline,
// seen at now: margin before it, or a quarter of the time left if less.
func watchdogAt(now, deadline time.Time, margin time.Duration) time.Time {
	return deadline.Add(-min(margin, deadline.Sub(now)/4))
}

// watchdog fires shortly before the test binary's deadline, unless the
// test ends first: go test -timeout panics the binary, and no cleanup
// runs, so this is the last moment to see what the processes were doing.
func (s *procSet) watchdog(deadline time.Time) {
	defer close(s.watchdogDone)
	tm := time.NewTimer(time.Until(watchdogAt(time.Now(), deadline, watchdogMargin)))
	defer tm.Stop()
	select {
	case <-s.stop:
		return
	case <-tm.C:
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "\n==== testutil watchdog: %s: the test binary's deadline (%s) is %s away: goroutine dumps of its processes (SIGQUIT) ====\n",
		s.t.Name(), deadline.Format(time.RFC3339), time.Until(deadline).Round(time.Millisecond))
	s.dumpGoroutines()
	if dir := os.Getenv(KeepLogsEnv); dir != "" {
		if kept, err := s.keep(dir); err != nil {
			fmt.Fprintf(&b, "keep logs: %v\n", err)
		} else {
			fmt.Fprintf(&b, "logs kept in %s\n", kept)
		}
	}
	for _, p := range s.list() {
		b.WriteString(p.tail(60))
		b.WriteString("\n")
		if d := p.goroutineDump(1 << 20); d != "" {
			fmt.Fprintf(&b, "---- goroutines of %s ----\n%s\n", p.Name, d)
		}
	}
	fmt.Fprintf(&b, "==== end of testutil watchdog: %s ====\n", s.t.Name())
	watchdogOut.Write(b.Bytes())
	s.t.Errorf("testutil watchdog: the test binary's deadline is near: took goroutine dumps of %d process(es); see the binary's stderr", len(s.list()))
}

// quitDump sends SIGQUIT to the process if it runs (SIGCONT first: a
// stopped process would not act on it) and waits up to wait for it to
// print its goroutines and exit. It records where in the log the dump
// starts.
func (p *Proc) quitDump(wait time.Duration) {
	if exited, _ := p.Exited(); exited {
		return
	}
	p.mu.Lock()
	if fi, err := p.log.Stat(); err == nil {
		p.dumpAt = fi.Size()
		p.dumpLog = p.log.Name()
	}
	p.mu.Unlock()
	p.Signal(syscall.SIGCONT)
	p.Signal(syscall.SIGQUIT)
	p.Wait(wait)
}

// goroutineDump returns the dump quitDump made the process print (its
// log from the SIGQUIT on), at most max bytes (the middle cut out).
func (p *Proc) goroutineDump(max int) string {
	p.mu.Lock()
	path, at := p.dumpLog, p.dumpAt
	p.mu.Unlock()
	if path == "" {
		return ""
	}
	b, err := os.ReadFile(path)
	if err != nil || int64(len(b)) < at {
		return ""
	}
	b = b[at:]
	if len(b) > max {
		cut := len(b) - max
		b = append(append(append([]byte(nil), b[:max/2]...), fmt.Sprintf("\n... %d bytes cut ...\n", cut)...), b[len(b)-max/2:]...)
	}
	return string(b)
}

// tail returns the last n lines of the process's current log before any
// goroutine dump, and where the dump is.
func (p *Proc) tail(n int) string {
	p.mu.Lock()
	path := p.log.Name()
	dumpPath, at := p.dumpLog, p.dumpAt
	starts := len(p.logs)
	p.mu.Unlock()
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("---- %s: %v ----", p.Name, err)
	}
	dumped := dumpPath == path && at <= int64(len(b))
	if dumped {
		b = b[:at]
	}
	if len(b) > 1<<20 {
		b = b[len(b)-1<<20:]
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	var out strings.Builder
	fmt.Fprintf(&out, "---- last lines of %s (%s", p.Name, path)
	if starts > 1 {
		fmt.Fprintf(&out, ", start %d of %d", starts, starts)
	}
	out.WriteString(") ----\n")
	out.WriteString(strings.Join(lines, "\n"))
	if dumped {
		fmt.Fprintf(&out, "\n---- %s: goroutine dump (SIGQUIT) in %s from byte %d ----", p.Name, path, at)
	}
	return out.String()
}

// logFiles returns the log of every start of the process, oldest first.
func (p *Proc) logFiles() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.logs...)
}
