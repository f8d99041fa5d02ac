package testutil

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestHelperProcess is not a test: it is the process the tests below
// start (this test binary run again), blocked in helperBlocked until it
// is killed or quit.
func TestHelperProcess(t *testing.T) {
	if !slices.Contains(flag.Args(), "testutil-helper") {
		t.Skip("the process the keep-logs tests start")
	}
	fmt.Println("helper started")
	helperBlocked()
}

//go:noinline
func helperBlocked() {
	for {
		time.Sleep(time.Hour)
	}
}

func startHelper(t testing.TB, name string) *Proc {
	p := StartProc(t, name, os.Args[0], "-test.run=^TestHelperProcess$", "-test.timeout=0", "--", "testutil-helper")
	Eventually(t, 30*time.Second, name+" started", func() bool {
		b, _ := os.ReadFile(p.LogPath())
		return bytes.Contains(b, []byte("helper started"))
	})
	return p
}

// fakeTB is a test whose outcome, deadline and cleanups the tests decide:
// the real test underneath gives TempDir, Helper and Fatal.
type fakeTB struct {
	testing.TB
	name     string
	failed   bool
	deadline time.Time

	mu       sync.Mutex
	cleanups []func()
	logs     []string
	errs     []string
}

func newFake(t *testing.T, failed bool) *fakeTB {
	return &fakeTB{TB: t, name: t.Name() + "/fake", failed: failed}
}

func (f *fakeTB) Name() string { return f.name }
func (f *fakeTB) Failed() bool { f.mu.Lock(); defer f.mu.Unlock(); return f.failed || len(f.errs) > 0 }
func (f *fakeTB) Cleanup(fn func()) {
	f.mu.Lock()
	f.cleanups = append(f.cleanups, fn)
	f.mu.Unlock()
}
func (f *fakeTB) Log(args ...any) {
	f.mu.Lock()
	f.logs = append(f.logs, fmt.Sprint(args...))
	f.mu.Unlock()
}
func (f *fakeTB) Logf(format string, args ...any) {
	f.mu.Lock()
	f.logs = append(f.logs, fmt.Sprintf(format, args...))
	f.mu.Unlock()
}
func (f *fakeTB) Errorf(format string, args ...any) {
	f.mu.Lock()
	f.errs = append(f.errs, fmt.Sprintf(format, args...))
	f.mu.Unlock()
}
func (f *fakeTB) Deadline() (time.Time, bool) { return f.deadline, !f.deadline.IsZero() }
func (f *fakeTB) output() string              { f.mu.Lock(); defer f.mu.Unlock(); return strings.Join(f.logs, "\n") }
func (f *fakeTB) errors() []string            { f.mu.Lock(); defer f.mu.Unlock(); return slices.Clone(f.errs) }

// end runs the cleanups as the testing package does: last in, first out.
func (f *fakeTB) end() {
	f.mu.Lock()
	fns := slices.Clone(f.cleanups)
	f.cleanups = nil
	f.mu.Unlock()
	for i := len(fns) - 1; i >= 0; i-- {
		fns[i]()
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// A test that fails: every process still running prints its goroutines
// into its log before the first is killed (a stopped one too), the
// tails are printed with where the dumps are, and with
// MERIDIAN_TEST_KEEP_LOGS every log is kept under the test's name.
func TestFailedTestDumpsGoroutinesBeforeKill(t *testing.T) {
	keep := t.TempDir()
	t.Setenv(KeepLogsEnv, keep)
	f := newFake(t, true)
	gone := startHelper(f, "helper-gone")
	gone.Kill() // the test killed it itself: nothing to dump, its log is kept
	a := startHelper(f, "helper-a")
	b := startHelper(f, "helper-b") // the last started: its cleanup runs first
	b.Signal(syscall.SIGSTOP)
	b.WaitStopped(t)
	f.end()

	for _, p := range []*Proc{a, b} {
		log := readFile(t, p.LogPath())
		if !strings.Contains(log, "SIGQUIT") || !strings.Contains(log, "testutil.helperBlocked") {
			t.Errorf("%s's log has no goroutine dump:\n%s", p.Name, log)
		}
		// Quit by SIGQUIT (a Go program exits with status 2 after the
		// dump), not killed by the cleanup's SIGKILL first.
		if _, err := p.Exited(); err == nil || !strings.Contains(err.Error(), "exit status 2") {
			t.Errorf("%s ended with %v, want exit status 2 (quit after its dump, before the kill)", p.Name, err)
		}
	}
	if log := readFile(t, gone.LogPath()); strings.Contains(log, "SIGQUIT") {
		t.Errorf("a process that had exited got a dump:\n%s", log)
	}
	out := f.output()
	for _, want := range []string{"last lines of helper-a", "last lines of helper-b", "last lines of helper-gone",
		"helper-a: goroutine dump (SIGQUIT) in " + a.LogPath(), "logs kept in " + filepath.Join(keep, strings.ReplaceAll(f.Name(), "/", "_"))} {
		if !strings.Contains(out, want) {
			t.Errorf("the test's output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "goroutine 1 [") {
		t.Errorf("the tails include the dump (they are the lines before it):\n%s", out)
	}
	dir := filepath.Join(keep, strings.ReplaceAll(f.Name(), "/", "_"))
	for _, name := range []string{"helper-a", "helper-b"} {
		if log := readFile(t, filepath.Join(dir, name+".log")); !strings.Contains(log, "testutil.helperBlocked") {
			t.Errorf("kept %s.log has no dump:\n%s", name, log)
		}
	}
	if log := readFile(t, filepath.Join(dir, "helper-gone.log")); !strings.Contains(log, "helper started") {
		t.Errorf("kept helper-gone.log: %q", log)
	}
}

// A test that passes: no dump, no tails; the logs are kept, every start
// of a restarted process.
func TestPassedTestKeepsLogsWithoutDump(t *testing.T) {
	keep := t.TempDir()
	t.Setenv(KeepLogsEnv, keep)
	f := newFake(t, false)
	p := startHelper(f, "helper")
	p.Restart()
	f.end()
	if log := readFile(t, p.LogPath()); strings.Contains(log, "SIGQUIT") {
		t.Errorf("a passing test's process got a dump:\n%s", log)
	}
	if out := f.output(); strings.Contains(out, "last lines") {
		t.Errorf("a passing test printed tails:\n%s", out)
	}
	dir := filepath.Join(keep, strings.ReplaceAll(f.Name(), "/", "_"))
	for _, name := range []string{"helper.log", "helper.start2.log"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Errorf("not kept: %v", err)
		}
	}
}

// Shortly before the test binary's deadline (go test -timeout panics the
// binary and no cleanup runs), the watchdog takes the dumps, keeps the
// logs and prints tails and dumps on the binary's stderr.
func TestWatchdogDumpsBeforeTheDeadline(t *testing.T) {
	keep := t.TempDir()
	t.Setenv(KeepLogsEnv, keep)
	var out bytes.Buffer
	var outMu sync.Mutex
	watchdogOut = writerFunc(func(b []byte) (int, error) { outMu.Lock(); defer outMu.Unlock(); return out.Write(b) })
	defer func() { watchdogOut = os.Stderr }()
	f := newFake(t, false)
	f.deadline = time.Now().Add(8 * time.Second) // the watchdog fires at a quarter of it before: ~6 s
	p := startHelper(f, "helper")
	Eventually(t, 30*time.Second, "the watchdog", func() bool { return len(f.errors()) > 0 })
	if time.Now().After(f.deadline) {
		t.Errorf("the watchdog fired after the deadline")
	}
	outMu.Lock()
	printed := out.String()
	outMu.Unlock()
	for _, want := range []string{"testutil watchdog: " + f.Name(), "last lines of helper", "---- goroutines of helper ----", "testutil.helperBlocked", "logs kept in "} {
		if !strings.Contains(printed, want) {
			t.Errorf("the watchdog's output lacks %q:\n%s", want, printed)
		}
	}
	if _, err := p.Exited(); err == nil || !strings.Contains(err.Error(), "exit status 2") {
		t.Errorf("helper ended with %v, want exit status 2 (quit after its dump)", err)
	}
	dir := filepath.Join(keep, strings.ReplaceAll(f.Name(), "/", "_"))
	if log := readFile(t, filepath.Join(dir, "helper.log")); !strings.Contains(log, "testutil.helperBlocked") {
		t.Errorf("kept helper.log has no dump:\n%s", log)
	}
	f.end()
}

// A test that ends before the watchdog fires stops it.
func TestWatchdogStopsWithTheTest(t *testing.T) {
	f := newFake(t, false)
	f.deadline = time.Now().Add(time.Hour)
	startHelper(f, "helper")
	s := setFor(f)
	f.end()
	select {
	case <-s.watchdogDone:
	case <-time.After(5 * time.Second):
		t.Fatal("the watchdog still runs after the test ended")
	}
	if len(f.errors()) > 0 {
		t.Fatal(f.errors())
	}
}

func TestWatchdogAt(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		left, margin, want time.Duration // want: before the deadline
	}{
		{10 * time.Minute, 20 * time.Second, 20 * time.Second},
		{40 * time.Second, 20 * time.Second, 10 * time.Second},
		{0, 20 * time.Second, 0},
	} {
		if got := now.Add(c.left).Sub(watchdogAt(now, now.Add(c.left), c.margin)); got != c.want {
			t.Errorf("%s left, margin %s: fires %s before the deadline, want %s", c.left, c.margin, got, c.want)
		}
	}
}

type writerFunc func([]byte) (int, error)

func (w writerFunc) Write(b []byte) (int, error) { return w(b) }
