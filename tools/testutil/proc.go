package testutil

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/internal/procstop"
)

var (
	buildOnce sync.Once
	buildPath string
	buildErr  error
)

// MeridianBinary builds cmd/meridian once per test binary and returns its
// path. Multi-process tests run the real binary, as an operator would.
func MeridianBinary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		removeDeadBuilds()
		dir := filepath.Join(os.TempDir(), binDirPrefix+strconv.Itoa(os.Getpid()))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			buildErr = err
			return
		}
		buildPath = filepath.Join(dir, "meridian")
		_, file, _, _ := runtime.Caller(0)
		root := filepath.Join(filepath.Dir(file), "..", "..")
		cmd := exec.Command("go", "build", "-o", buildPath, "./cmd/meridian")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return buildPath
}

// binDirPrefix names MeridianBinary's build directories in the temp dir,
// the test binary's pid after it.
const binDirPrefix = "meridian-bin-pid-"

// removeDeadBuilds removes the build directories of test binaries that
// are no longer running: each holds a 70 MB binary, and nothing else
// removes them (a test binary has no hook that runs after its last test),
// so a machine running the suite over and over filled its disk with them.
func removeDeadBuilds() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), binDirPrefix+"*"))
	for _, d := range dirs {
		pid, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(d), binDirPrefix))
		if err != nil || pid <= 0 || pid == os.Getpid() {
			continue // not one of these (the older random "meridian-bin-N" names are left alone)
		}
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			os.RemoveAll(d)
		}
	}
}

// Proc is a real OS process started by a test. It is killed (SIGKILL) when
// the test ends if still running.
type Proc struct {
	Name string
	Bin  string
	Args []string
	t    testing.TB
	cmd  *exec.Cmd
	log  *os.File
	done chan struct{}
	mu   sync.Mutex
	err  error
	set  *procSet
	logs []string // the log of every start, oldest first
	// dumpLog, dumpAt: the log a goroutine dump (SIGQUIT) went to, and
	// its size before it.
	dumpLog string
	dumpAt  int64
}

// StartProc starts bin with args; stdout and stderr go to a log file in the
// system's temp dir, one per start. When the test fails, every process of
// the test still running prints its goroutines into its log (SIGQUIT)
// before the first is killed, and the tails of the logs are printed; a
// watchdog does the same shortly before the test binary's deadline; with
// MERIDIAN_TEST_KEEP_LOGS=DIR the logs are copied to DIR/<TestName>/
// (keeplogs.go).
func StartProc(t testing.TB, name, bin string, args ...string) *Proc {
	t.Helper()
	set := setFor(t)
	p := &Proc{Name: name, Bin: bin, Args: args, t: t, set: set}
	p.start()
	set.add(p)
	t.Cleanup(func() {
		set.beforeKill()
		p.Kill()
	})
	return p
}

func (p *Proc) start() {
	p.t.Helper()
	bin := p.Bin
	logPath := filepath.Join(os.TempDir(), fmt.Sprintf("meridian-%s-%d.log", p.Name, time.Now().UnixNano()))
	f, err := os.Create(logPath)
	if err != nil {
		p.t.Fatal(err)
	}
	cmd := exec.Command(bin, p.Args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		p.t.Fatalf("start %s: %v", p.Name, err)
	}
	p.mu.Lock()
	p.cmd, p.log, p.done = cmd, f, make(chan struct{})
	p.logs = append(p.logs, logPath)
	done := p.done
	p.mu.Unlock()
	go func() {
		err := cmd.Wait()
		p.mu.Lock()
		p.err = err
		p.mu.Unlock()
		close(done)
	}()
}

// Restart starts the process again with the same arguments (after Kill).
func (p *Proc) Restart() {
	p.t.Helper()
	p.Kill()
	p.start()
}

// Kill sends SIGKILL and waits for the process to be gone.
func (p *Proc) Kill() { p.Signal(syscall.SIGKILL); p.Wait(30 * time.Second) }

// Signal sends sig (SIGKILL, SIGSTOP, SIGCONT, SIGTERM).
func (p *Proc) Signal(sig syscall.Signal) {
	p.mu.Lock()
	cmd := p.cmd
	p.mu.Unlock()
	if cmd != nil && cmd.Process != nil {
		_ = cmd.Process.Signal(sig)
	}
}

// Wait waits up to d for the process to exit; it reports whether it did.
func (p *Proc) Wait(d time.Duration) bool {
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	if done == nil {
		return true
	}
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}

// Exited reports whether the process has exited, and its error.
func (p *Proc) Exited() (bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// Pid returns the process id.
func (p *Proc) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd.Process.Pid
}

// LogPath returns the path of the process's output.
func (p *Proc) LogPath() string { return p.log.Name() }

// WaitListening waits until addr accepts TCP connections.
func WaitListening(t testing.TB, addr string, timeout time.Duration) {
	t.Helper()
	Eventually(t, timeout, addr+" listening", func() bool {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err != nil {
			return false
		}
		c.Close()
		return true
	})
}

// WaitStopped waits until the process is stopped (after SIGSTOP): signal
// delivery is asynchronous, so a test that must not race the pause waits
// for the kernel to report every thread stopped (internal/procstop).
func (p *Proc) WaitStopped(t testing.TB) {
	t.Helper()
	WaitPidStopped(t, p.Pid())
}

// WaitPidStopped waits up to 10 s until every thread of pid is stopped.
func WaitPidStopped(t testing.TB, pid int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := procstop.Wait(ctx, pid); err != nil {
		t.Fatal(err)
	}
}
