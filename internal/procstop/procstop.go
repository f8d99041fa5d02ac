// Package procstop tells when a process signalled with SIGSTOP has really
// stopped. kill(2) returns once the signal is queued; the stop itself
// happens when one of the process's threads next runs and takes the
// signal, and that thread then stops the others. On a loaded machine the
// threads still running can serve requests for milliseconds after kill
// returns (a paused bookie acknowledged one more add; CI saw it), so
// whatever must not race the pause waits for every thread to be stopped.
package procstop

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Stopped reports whether every thread of pid is stopped (state T, or t
// under a tracer), from /proc/PID/task/*/stat.
func Stopped(pid int) (bool, error) {
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", pid))
	if err != nil {
		return false, err
	}
	if len(tasks) == 0 {
		return false, fmt.Errorf("procstop: pid %d: no such process", pid)
	}
	for _, f := range tasks {
		b, err := os.ReadFile(f)
		if err != nil {
			if os.IsNotExist(err) {
				continue // a thread that exited meanwhile
			}
			return false, err
		}
		st, err := state(string(b))
		if err != nil {
			return false, fmt.Errorf("procstop: %s: %w", f, err)
		}
		if st != 'T' && st != 't' {
			return false, nil
		}
	}
	return true, nil
}

// state returns the state field of a /proc stat line: the first field
// after the command name, which is parenthesised and may itself hold
// spaces and parentheses.
func state(stat string) (byte, error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 || i+2 >= len(stat) || stat[i+1] != ' ' {
		return 0, fmt.Errorf("malformed stat line %q", stat)
	}
	return stat[i+2], nil
}

// Wait returns once every thread of pid is stopped, or the error that
// ends the wait (ctx's, or the process's being gone).
func Wait(ctx context.Context, pid int) error {
	for {
		ok, err := Stopped(pid)
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("procstop: pid %d not stopped: %w", pid, ctx.Err())
		case <-time.After(time.Millisecond):
		}
	}
}
