package procstop

import (
	"context"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

func TestState(t *testing.T) {
	for _, c := range []struct {
		line string
		want byte
		ok   bool
	}{
		{"123 (meridian) S 1 2 3", 'S', true},
		{"123 (a) b) (c) T 1 2 3", 'T', true},
		{"123 (x y) t 1", 't', true},
		{"123 (meridian", 0, false},
		{"123 (m)", 0, false},
	} {
		got, err := state(c.line)
		if (err == nil) != c.ok || got != c.want {
			t.Errorf("state(%q) = %q, %v; want %q, ok %v", c.line, got, err, c.want, c.ok)
		}
	}
}

// A real process, stopped and continued: Stopped follows it, and Wait
// returns once it is stopped.
func TestStoppedFollowsSignals(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	pid := cmd.Process.Pid
	if ok, err := Stopped(pid); err != nil || ok {
		t.Fatalf("running process: Stopped = %v, %v", ok, err)
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := Wait(ctx, pid); err != nil {
		t.Fatal(err)
	}
	if ok, err := Stopped(pid); err != nil || !ok {
		t.Fatalf("after Wait: Stopped = %v, %v", ok, err)
	}
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		ok, err := Stopped(pid)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("still stopped 10 s after SIGCONT")
		}
		time.Sleep(time.Millisecond)
	}
	// A running process never satisfies Wait.
	short, cancel2 := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel2()
	if err := Wait(short, pid); err == nil {
		t.Fatal("Wait returned nil for a running process")
	}
	cmd.Process.Kill()
	cmd.Wait()
	if _, err := Stopped(pid); err == nil {
		t.Fatal("Stopped of a reaped process: no error")
	}
}
