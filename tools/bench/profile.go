package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Profiles of Meridian's processes under load: every meridian process
// started with MERIDIAN_PPROF_DIR=DIR serves net/http/pprof on a free
// loopback port and writes it to DIR/PID.addr (cmd/meridian/pprof.go).

// pprofAddr waits up to 10 s for pid's address file in dir.
func pprofAddr(dir string, pid int) (string, error) {
	f := filepath.Join(dir, strconv.Itoa(pid)+".addr")
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if b, err := os.ReadFile(f); err == nil && len(b) > 0 {
			return strings.TrimSpace(string(b)), nil
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("bench: no pprof address from pid %d in %s", pid, dir)
		}
	}
}

// profilePair is a CPU and an allocation profile of one process over the
// same window.
type profilePair struct {
	Name     string // "standalone (broker + 3 bookies + etcd)", ...
	Bin      string
	CPU      string // file
	Allocs   string // file (delta over the window: allocs?seconds=N)
	Window   time.Duration
	CPUTop   string // go tool pprof -top output, trimmed
	AllocTop string
	Buckets  []bucketShare
	Err      error
}

// captureProfiles takes a CPU profile and an allocation delta profile of
// the process serving pprof at addr over the same window, into dir as
// NAME.cpu.pb.gz and NAME.allocs.pb.gz. It blocks for the window.
func captureProfiles(ctx context.Context, addr, dir, file string, window time.Duration) (cpu, allocs string, err error) {
	secs := max(1, int(window.Seconds()))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", "", err
	}
	cpu = filepath.Join(dir, file+".cpu.pb.gz")
	allocs = filepath.Join(dir, file+".allocs.pb.gz")
	var wg sync.WaitGroup
	var e1, e2 error
	get := func(url, path string, e *error) {
		defer wg.Done()
		req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
		resp, err := (&http.Client{Timeout: window + 30*time.Second}).Do(req)
		if err != nil {
			*e = err
			return
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			*e = fmt.Errorf("GET %s: %s", url, resp.Status)
			return
		}
		f, err := os.Create(path)
		if err != nil {
			*e = err
			return
		}
		defer f.Close()
		_, *e = io.Copy(f, resp.Body)
	}
	wg.Add(2)
	go get(fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", addr, secs), cpu, &e1)
	go get(fmt.Sprintf("http://%s/debug/pprof/allocs?seconds=%d", addr, secs), allocs, &e2)
	wg.Wait()
	if e1 != nil {
		return "", "", fmt.Errorf("bench: cpu profile: %w", e1)
	}
	if e2 != nil {
		return "", "", fmt.Errorf("bench: allocation profile: %w", e2)
	}
	return cpu, allocs, nil
}

// pprofTop is `go tool pprof -top -nodecount=N [flags] bin file`, with
// the header lines kept.
func pprofTop(ctx context.Context, bin, file string, n int, flags ...string) (string, error) {
	args := append([]string{"tool", "pprof", "-top", fmt.Sprintf("-nodecount=%d", n)}, flags...)
	args = append(args, bin, file)
	b, err := exec.CommandContext(ctx, "go", args...).Output()
	if err != nil {
		return "", fmt.Errorf("bench: go %s: %w", strings.Join(args, " "), err)
	}
	var lines []string
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	for sc.Scan() {
		l := sc.Text()
		if strings.HasPrefix(l, "File:") || strings.HasPrefix(l, "Build ID:") || strings.HasPrefix(l, "Time:") {
			continue
		}
		// Shorten the long generic instantiation names.
		if len(l) > 160 {
			l = l[:157] + "..."
		}
		lines = append(lines, l)
	}
	return strings.Join(lines, "\n"), nil
}

// bucket is a named set of functions whose cumulative share of a CPU
// profile is reported (the buckets overlap: a share is of all samples).
type bucket struct {
	Name  string
	Focus string // regexp on function names (pprof -focus)
}

type bucketShare struct {
	Name  string
	Share float64 // of all samples, 0..1
}

var cpuBuckets = []bucket{
	{"Pebble compactions and flushes (the index LSM, background)", `pebble/v2\.\(\*DB\)\.(compact|flush|runCompaction|runPickedCompaction)`},
	{"bookie group commit (all of it: frame and index batch, write, fdatasync)", `bookie\.\(\*Store\)\.commit`},
	{"bookie entry log frame write and fdatasync (in the group commit)", `bookie\.\(\*entryLog\)\.commitFrame`},
	{"bookie entry log zeros written ahead (background)", `bookie\.\(\*zeroer\)\.run`},
	{"Pebble WAL writes (the index, unsynced)", `pebble/v2/record\.\(\*LogWriter\)`},
	{"gRPC (bookie adds, replication): transport and codec", `google\.golang\.org/grpc`},
	{"Pulsar protocol, topics, producers and subscriptions (broker)", `meridian/broker\.`},
	{"managed ledger and ledger client", `meridian/(broker/mledger|bookie/ledger)\.`},
	{"etcd (embedded server and clients)", `go\.etcd\.io`},
	{"garbage collection (mark, assist, sweep)", `runtime\.(gcBgMarkWorker|gcAssistAlloc|bgsweep|bgscavenge|markroot)`},
	{"system calls (all: write, fdatasync, read, futex)", `^syscall\.|internal/runtime/syscall`},
}

var showingRE = regexp.MustCompile(`Showing nodes accounting for [^,]+, ([0-9.]+)% of`)

// bucketShares measures each bucket's cumulative share of the profile:
// pprof -focus keeps the samples with a matching frame, and its header
// says what percentage of all samples they are.
func bucketShares(ctx context.Context, bin, file string) []bucketShare {
	var out []bucketShare
	for _, b := range cpuBuckets {
		txt, err := pprofTop(ctx, bin, file, 1, "-focus="+b.Focus)
		share := 0.0
		if err == nil {
			if m := showingRE.FindStringSubmatch(txt); m != nil {
				share, _ = strconv.ParseFloat(m[1], 64)
				share /= 100
			}
		}
		out = append(out, bucketShare{b.Name, share})
	}
	return out
}

// summarise fills the pair's top listings and buckets.
func (p *profilePair) summarise(ctx context.Context) {
	if p.Err != nil {
		return
	}
	var err error
	if p.CPUTop, err = pprofTop(ctx, p.Bin, p.CPU, 20, "-cum"); err != nil {
		p.Err = err
		return
	}
	if p.AllocTop, err = pprofTop(ctx, p.Bin, p.Allocs, 12, "-sample_index=alloc_space"); err != nil {
		p.Err = err
		return
	}
	p.Buckets = bucketShares(ctx, p.Bin, p.CPU)
}

// markdown renders the pair: the buckets as a table, the top listings
// folded.
func (p *profilePair) markdown(sb *strings.Builder) {
	fmt.Fprintf(sb, "**%s**, %v under load", p.Name, p.Window)
	if p.Err != nil {
		fmt.Fprintf(sb, ": not profiled (%v)\n\n", p.Err)
		return
	}
	fmt.Fprintf(sb, " (`%s`, `%s`):\n\n", filepath.Base(p.CPU), filepath.Base(p.Allocs))
	fmt.Fprintf(sb, "| where the CPU goes (cumulative, buckets overlap) | share of samples |\n|---|---:|\n")
	for _, b := range p.Buckets {
		fmt.Fprintf(sb, "| %s | %.0f %% |\n", b.Name, b.Share*100)
	}
	fmt.Fprintf(sb, "\n<details><summary>go tool pprof -top -cum (CPU), -sample_index=alloc_space (allocations)</summary>\n\n```\n%s\n```\n\n```\n%s\n```\n\n</details>\n\n", p.CPUTop, p.AllocTop)
}
