package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// standaloneProc is `meridian standalone` run as a separate OS process on
// free loopback ports, so the broker's CPU and memory are its own and not
// the load generator's.
type standaloneProc struct {
	cmd      *exec.Cmd
	done     chan struct{} // closed when cmd.Wait returns
	waitErr  error
	URL      string // pulsar://127.0.0.1:PORT
	AdminURL string // http://127.0.0.1:PORT
	LogPath  string
	// BookieMetrics: the bookies' Prometheus endpoints (http://ADDR/metrics).
	BookieMetrics []string
	// PprofDir: where the process wrote its pprof address (MERIDIAN_PPROF_DIR).
	PprofDir string
}

// buildMeridian builds ./cmd/meridian into dir (run from the module root).
func buildMeridian(ctx context.Context, dir string) (string, error) {
	bin := filepath.Join(dir, "meridian")
	c := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/meridian")
	c.Stdout, c.Stderr = os.Stderr, os.Stderr
	if err := c.Run(); err != nil {
		return "", fmt.Errorf("bench: go build ./cmd/meridian (run from the module root, or pass the binary): %w", err)
	}
	return bin, nil
}

// startStandalone starts bin standalone with its data under dir and waits
// until GET /admin/v2/tenants answers 200. The process gets SIGTERM when ctx
// is cancelled, and SIGKILL if this process dies first (Pdeathsig).
func startStandalone(ctx context.Context, bin, dir string) (*standaloneProc, error) {
	var addrs [8]string
	for i := range addrs {
		a, err := freeAddr()
		if err != nil {
			return nil, err
		}
		addrs[i] = a
	}
	pprofDir := filepath.Join(dir, "pprof")
	if err := os.MkdirAll(pprofDir, 0o755); err != nil {
		return nil, err
	}
	logf, err := os.Create(filepath.Join(dir, "standalone.log"))
	if err != nil {
		return nil, err
	}
	defer logf.Close() // the child holds its own descriptor
	c := exec.Command(bin, "standalone",
		"--data-dir", filepath.Join(dir, "standalone"),
		"--listen", addrs[0], "--admin", addrs[1],
		"--etcd-client-url", "http://"+addrs[2], "--etcd-peer-url", "http://"+addrs[3],
		"--bookie-base-port", "0", "--bookie-metrics", strings.Join(addrs[4:7], ","), "--log-level", "warn")
	// The replication listener through its variable, not --replication-
	// listen: a standalone of before (bench ab's A) has no such flag, and
	// knows the key (the broker role's) without applying it.
	c.Env = append(os.Environ(), "MERIDIAN_PPROF_DIR="+pprofDir, "MERIDIAN_BROKER_REPLICATION_ADDR="+addrs[7])
	c.Stdout, c.Stderr = logf, logf
	c.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := c.Start(); err != nil {
		return nil, fmt.Errorf("bench: start %s standalone: %w", bin, err)
	}
	p := &standaloneProc{cmd: c, done: make(chan struct{}), URL: "pulsar://" + addrs[0], AdminURL: "http://" + addrs[1], LogPath: logf.Name(), PprofDir: pprofDir}
	for _, a := range addrs[4:7] {
		p.BookieMetrics = append(p.BookieMetrics, "http://"+a+"/metrics")
	}
	go func() {
		p.waitErr = c.Wait()
		close(p.done)
	}()
	go func() {
		select {
		case <-ctx.Done():
			p.stop()
		case <-p.done:
		}
	}()
	deadline := time.Now().Add(90 * time.Second)
	for {
		resp, err := http.Get(p.AdminURL + "/admin/v2/tenants")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p, nil
			}
		}
		select {
		case <-p.done:
			return nil, fmt.Errorf("bench: standalone exited before ready (%v); log %s:\n%s", p.waitErr, p.LogPath, p.logTail(20))
		case <-ctx.Done():
			p.stop()
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			p.stop()
			return nil, fmt.Errorf("bench: standalone not ready after 90s; log %s:\n%s", p.LogPath, p.logTail(20))
		}
	}
}

// stop sends SIGTERM, and SIGKILL if the process has not exited 15 s later.
func (p *standaloneProc) stop() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(15 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// exited reports whether the process has exited (it must not during a run).
func (p *standaloneProc) exited() error {
	select {
	case <-p.done:
		return fmt.Errorf("bench: standalone exited (%v); log %s:\n%s", p.waitErr, p.LogPath, p.logTail(20))
	default:
		return nil
	}
}

// cpu returns the process's user+system CPU time so far, from
// /proc/PID/stat (utime and stime, in clock ticks of 1/100 s on Linux).
func (p *standaloneProc) cpu() (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces; fields count from after ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, errors.New("bench: unparsable /proc stat")
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, errors.New("bench: short /proc stat")
	}
	// f[0] is field 3 (state); utime is field 14, stime field 15.
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, errors.New("bench: bad /proc stat times")
	}
	return time.Duration(ut+st) * 10 * time.Millisecond, nil
}

// logLines returns the standalone's log lines (warnings and errors: it
// runs with --log-level warn).
func (p *standaloneProc) logLines() []string {
	f, err := os.Open(p.LogPath)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		out = append(out, sc.Text())
	}
	return out
}

func (p *standaloneProc) logTail(n int) string {
	l := p.logLines()
	return strings.Join(l[max(0, len(l)-n):], "\n")
}

// bookieCounters are the standalone's bookies' counters, summed.
type bookieCounters struct {
	Commits, Entries, Reads, BytesWritten float64
}

func (c bookieCounters) sub(o bookieCounters) bookieCounters {
	return bookieCounters{c.Commits - o.Commits, c.Entries - o.Entries, c.Reads - o.Reads, c.BytesWritten - o.BytesWritten}
}

// bookies scrapes the bookies' group commits (fsyncs), the entries they
// committed, the reads they answered (ReadEntry, ReadLac) and the bytes
// they committed, summed over the bookies.
func (p *standaloneProc) bookies() bookieCounters {
	var c bookieCounters
	for _, u := range p.BookieMetrics {
		m := scrapeMetrics(u)
		c.Commits += m["meridian_bookie_group_commits_total"]
		c.Entries += m["meridian_bookie_group_commit_entries_sum"]
		c.Reads += m["meridian_bookie_reads_total"]
		c.BytesWritten += m["meridian_bookie_written_bytes_total"]
	}
	return c
}

// scrapeMetrics reads a Prometheus text endpoint and sums each metric's
// series (all label sets) by name.
func scrapeMetrics(url string) map[string]float64 {
	out := map[string]float64{}
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get(url)
	if err != nil {
		return out
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		if l == "" || l[0] == '#' {
			continue
		}
		sp := strings.LastIndexByte(l, ' ')
		if sp < 0 {
			continue
		}
		name := l[:sp]
		if i := strings.IndexByte(name, '{'); i >= 0 {
			name = name[:i]
		}
		v, err := strconv.ParseFloat(l[sp+1:], 64)
		if err != nil {
			continue
		}
		out[name] += v
	}
	return out
}
