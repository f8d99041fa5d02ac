// Package ports hands out TCP ports for processes a test or `meridian up`
// is about to start, so that no two planners on this machine hand out the
// same port, even when they run at once (two test binaries, a drill beside
// a test run).
//
// Ports are picked below the kernel's ephemeral range (Linux default
// 32768-60999): a port the kernel hands out for ":0" may be taken by some
// process's outgoing connection (etcd peers dial each other) before the
// planned process binds it. Each port is handed out once per process, and
// is reserved machine-wide by a file under Dir naming this process's pid:
// another planner skips a port whose reservation names a live process, and
// takes over one whose process is gone. A port that something else already
// listens on is skipped.
package ports

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// Low and High bound the ports handed out: [Low, High).
const Low, High = 20000, 32000

// Dir holds the machine-wide reservations, one file per port.
var Dir = filepath.Join(os.TempDir(), "meridian-ports")

var (
	mu   sync.Mutex
	used = map[int]bool{}
	next = Low + rand.IntN(High-Low)
)

// Free returns "host:port" with a port that was free a moment ago and that
// no other live planner on this machine holds.
func Free(host string) (string, error) {
	mu.Lock()
	defer mu.Unlock()
	for i := 0; i < High-Low; i++ {
		port := next
		next++
		if next >= High {
			next = Low
		}
		if used[port] {
			continue
		}
		addr := net.JoinHostPort(host, strconv.Itoa(port))
		l, err := net.Listen("tcp", addr)
		if err != nil {
			continue
		}
		l.Close()
		ok, err := reserve(port)
		if err != nil {
			return "", err
		}
		used[port] = true // ours, or another live process's: never again
		if ok {
			return addr, nil
		}
	}
	return "", fmt.Errorf("ports: no free port in %d-%d on %s", Low, High, host)
}

// reserve takes port machine-wide unless a live process holds it. The
// check and the write happen under an exclusive lock on Dir/.lock, so two
// planners never both take over a stale reservation.
func reserve(port int) (bool, error) {
	if err := os.MkdirAll(Dir, 0o777); err != nil {
		return false, fmt.Errorf("ports: %w", err)
	}
	lf, err := os.OpenFile(filepath.Join(Dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return false, fmt.Errorf("ports: %w", err)
	}
	defer lf.Close()
	if err := syscall.Flock(int(lf.Fd()), syscall.LOCK_EX); err != nil {
		return false, fmt.Errorf("ports: lock: %w", err)
	}
	defer syscall.Flock(int(lf.Fd()), syscall.LOCK_UN)

	path := filepath.Join(Dir, strconv.Itoa(port))
	if b, err := os.ReadFile(path); err == nil {
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid != os.Getpid() && alive(pid) {
			return false, nil
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return false, fmt.Errorf("ports: %w", err)
	}
	if err := os.WriteFile(path, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o666); err != nil {
		return false, fmt.Errorf("ports: %w", err)
	}
	return true, nil
}

// alive reports whether a process with this pid exists.
func alive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
