package ports

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
)

// TestFreeSkipsPortsHeldByALiveProcess: a port reserved by another live
// process is never handed out here; a reservation whose process is gone is
// taken over.
func TestFreeSkipsPortsHeldByALiveProcess(t *testing.T) {
	Dir = t.TempDir()
	// A live process other than this one: a sleeping child.
	child := exec.Command("sleep", "60")
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer child.Process.Kill()
	// A process that is gone: a child that ran and was reaped.
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}

	mu.Lock()
	if next >= High-2 {
		next = Low
	}
	start := next
	mu.Unlock()
	held, stale := start, start+1
	write := func(port, pid int) {
		if err := os.WriteFile(filepath.Join(Dir, strconv.Itoa(port)), []byte(strconv.Itoa(pid)), 0o666); err != nil {
			t.Fatal(err)
		}
	}
	write(held, child.Process.Pid)
	write(stale, dead.Process.Pid)

	got := map[int]bool{}
	for i := 0; i < 5; i++ {
		addr, err := Free("127.0.0.1")
		if err != nil {
			t.Fatal(err)
		}
		_, p, _ := net.SplitHostPort(addr)
		port, _ := strconv.Atoi(p)
		if got[port] {
			t.Fatalf("port %d handed out twice", port)
		}
		got[port] = true
		b, err := os.ReadFile(filepath.Join(Dir, p))
		if err != nil || string(b) != strconv.Itoa(os.Getpid())+"\n" {
			t.Fatalf("port %d: reservation %q (%v), want this pid", port, b, err)
		}
	}
	if got[held] {
		t.Errorf("port %d is held by live pid %d and was handed out", held, child.Process.Pid)
	}
	if !got[stale] {
		// Only if nothing else listened on it.
		if l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(stale))); err == nil {
			l.Close()
			t.Errorf("port %d's reservation names a gone process and was not taken over", stale)
		}
	}
}
