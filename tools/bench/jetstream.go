package bench

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/meridian-mq/meridian/internal/ports"
)

// NATS JetStream, the peer: nats-server processes on 127.0.0.1 with their
// data under a temporary directory, driven by `nats bench` (the nats CLI's
// own load generator), every process started here and stopped here.

// jsMode is one JetStream configuration.
type jsMode struct {
	Key        string // r1, r1-always, r3, r3-always
	Name       string // for the table
	Replicas   int    // 1: one server; 3: a 3-node cluster on loopback
	SyncAlways bool   // jetstream { sync_interval: always }
}

var jsModes = []jsMode{
	{"r1", "JetStream R1, default fsync (every 2 min)", 1, false},
	{"r1-always", "JetStream R1, sync_interval: always", 1, true},
	{"r3", "JetStream R3 (3 nodes, loopback), default fsync", 3, false},
	{"r3-always", "JetStream R3 (3 nodes, loopback), sync_interval: always", 3, true},
}

// jsServer is one nats-server process.
type jsServer struct {
	cmd     *exec.Cmd
	done    chan struct{}
	waitErr error
	URL     string // nats://127.0.0.1:P
	HTTP    string // http://127.0.0.1:P (monitoring)
	Conf    string
	Log     string
}

// jsDeployment is a set of nats-server processes: one server, a
// 3-node cluster, or the two domains of the mirror measurement.
type jsDeployment struct {
	servers []*jsServer
	dir     string
}

// URL is the servers' client URLs, comma-separated (what `nats -s` takes).
func (d *jsDeployment) URL() string {
	var u []string
	for _, s := range d.servers {
		u = append(u, s.URL)
	}
	return strings.Join(u, ",")
}

func (d *jsDeployment) pids() []int {
	var out []int
	for _, s := range d.servers {
		out = append(out, s.cmd.Process.Pid)
	}
	return out
}

// cpu is the user+system CPU time so far of every server (rusage as the
// kernel keeps it: utime+stime of /proc/PID/stat).
func (d *jsDeployment) cpu() time.Duration {
	var sum time.Duration
	for _, pid := range d.pids() {
		c, _ := pidCPU(pid)
		sum += c
	}
	return sum
}

// stop sends SIGTERM to every server, SIGKILL after 10 s, and removes
// the data directory.
func (d *jsDeployment) stop() {
	for _, s := range d.servers {
		select {
		case <-s.done:
		default:
			_ = s.cmd.Process.Signal(syscall.SIGTERM)
		}
	}
	for _, s := range d.servers {
		select {
		case <-s.done:
		case <-time.After(10 * time.Second):
			_ = s.cmd.Process.Kill()
			<-s.done
		}
	}
	_ = os.RemoveAll(d.dir)
}

// startJS starts one nats-server per config body (a function of the
// server's own client, http and extra ports) under dir and waits until
// every /healthz answers ok.
func startJS(ctx context.Context, bin, dir string, confs []func(client, http string) string) (*jsDeployment, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	d := &jsDeployment{dir: dir}
	for i, conf := range confs {
		ca, err := ports.Free("127.0.0.1")
		if err != nil {
			return nil, err
		}
		ha, err := ports.Free("127.0.0.1")
		if err != nil {
			return nil, err
		}
		s := &jsServer{URL: "nats://" + ca, HTTP: "http://" + ha, done: make(chan struct{}),
			Conf: filepath.Join(dir, fmt.Sprintf("n%d.conf", i+1)), Log: filepath.Join(dir, fmt.Sprintf("n%d.log", i+1))}
		if err := os.WriteFile(s.Conf, []byte(conf(ca, ha)), 0o644); err != nil {
			return nil, err
		}
		logf, err := os.Create(s.Log)
		if err != nil {
			return nil, err
		}
		s.cmd = exec.Command(bin, "-c", s.Conf)
		s.cmd.Stdout, s.cmd.Stderr = logf, logf
		s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		err = s.cmd.Start()
		logf.Close()
		if err != nil {
			d.stop()
			return nil, fmt.Errorf("bench: start nats-server: %w", err)
		}
		go func() { s.waitErr = s.cmd.Wait(); close(s.done) }()
		d.servers = append(d.servers, s)
	}
	deadline := time.Now().Add(60 * time.Second)
	for _, s := range d.servers {
		for {
			resp, err := http.Get(s.HTTP + "/healthz")
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					break
				}
			}
			select {
			case <-s.done:
				b, _ := os.ReadFile(s.Log)
				d.stop()
				return nil, fmt.Errorf("bench: nats-server exited (%v): %s", s.waitErr, lastLines(string(b), 10))
			case <-ctx.Done():
				d.stop()
				return nil, ctx.Err()
			case <-time.After(100 * time.Millisecond):
			}
			if time.Now().After(deadline) {
				b, _ := os.ReadFile(s.Log)
				d.stop()
				return nil, fmt.Errorf("bench: nats-server not healthy after 60 s: %s", lastLines(string(b), 10))
			}
		}
	}
	return d, nil
}

func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(l[max(0, len(l)-n):], "\n")
}

// jsConf is the configuration the peer reference used (peers/nats_js.sh):
// file store under dir, and for R3 a cluster block listing all routes.
func jsConf(name, store string, syncAlways bool, cluster string, routes []string) func(string, string) string {
	return func(client, httpAddr string) string {
		var b strings.Builder
		fmt.Fprintf(&b, "server_name: %s\nlisten: %s\nhttp: %s\n", name, client, httpAddr)
		fmt.Fprintf(&b, "jetstream {\n  store_dir: %q\n  max_file_store: 16GB\n  max_memory_store: 256MB\n", store)
		if syncAlways {
			b.WriteString("  sync_interval: always\n")
		}
		b.WriteString("}\n")
		if cluster != "" {
			fmt.Fprintf(&b, "cluster {\n  name: C3\n  listen: %s\n  routes: [", cluster)
			for i, r := range routes {
				if i > 0 {
					b.WriteString(", ")
				}
				fmt.Fprintf(&b, "%q", "nats-route://"+r)
			}
			b.WriteString("]\n}\n")
		}
		return b.String()
	}
}

// startJSMode starts mode's server(s) under dir.
func startJSMode(ctx context.Context, bin, dir string, m jsMode) (*jsDeployment, error) {
	if m.Replicas == 1 {
		return startJS(ctx, bin, dir, []func(string, string) string{jsConf("s1", filepath.Join(dir, "s1"), m.SyncAlways, "", nil)})
	}
	routes := make([]string, m.Replicas)
	for i := range routes {
		a, err := ports.Free("127.0.0.1")
		if err != nil {
			return nil, err
		}
		routes[i] = a
	}
	var confs []func(string, string) string
	for i := range m.Replicas {
		n := fmt.Sprintf("n%d", i+1)
		confs = append(confs, jsConf(n, filepath.Join(dir, n), m.SyncAlways, routes[i], routes))
	}
	// /healthz answers ok per server; the cluster's meta leader may come
	// a moment later (measureJS retries its first stream creation).
	return startJS(ctx, bin, dir, confs)
}

// natsBench is one `nats bench` run's result.
type natsBench struct {
	Args      []string // the command line after `nats`
	MsgsPerS  float64
	Msgs      int
	Elapsed   time.Duration
	P50, P99  time.Duration // per publish (sync) or per batch ack (async)
	ClientCPU time.Duration // the nats process's rusage (user+system)
	ServerCPU time.Duration // the servers' CPU during the run
	Flushes   uint64        // disk flush requests completed during the run (machine-wide)
}

// runNATS runs `nats ARGS --no-progress --csv FILE` with a timeout and
// parses the first data row of the CSV. nats bench's MsgCount column is
// twice the real count (peers/README.md): Msgs comes from MsgsPerSec ×
// DurationSecs.
func runNATS(ctx context.Context, natsBin string, d *jsDeployment, dir string, timeout time.Duration, args ...string) (natsBench, error) {
	f := filepath.Join(dir, "bench.csv")
	_ = os.Remove(f)
	full := append(append([]string{}, args...), "--no-progress", "--csv", f)
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	c := exec.CommandContext(cctx, natsBin, full...)
	var outb strings.Builder
	c.Stdout, c.Stderr = &outb, &outb
	s0 := d.cpu()
	fl0 := diskFlushes()
	err := c.Run()
	r := natsBench{Args: args, ServerCPU: d.cpu() - s0, Flushes: diskFlushes() - fl0}
	if c.ProcessState != nil {
		r.ClientCPU = c.ProcessState.UserTime() + c.ProcessState.SystemTime()
	}
	if err != nil {
		return r, fmt.Errorf("bench: nats %s: %w: %s", strings.Join(args, " "), err, lastLines(outb.String(), 5))
	}
	b, err := os.ReadFile(f)
	if err != nil {
		return r, fmt.Errorf("bench: nats %s wrote no CSV: %w: %s", strings.Join(args, " "), err, lastLines(outb.String(), 5))
	}
	rows, err := csv.NewReader(strings.NewReader(string(b))).ReadAll()
	if err != nil || len(rows) < 2 {
		return r, fmt.Errorf("bench: nats %s: unreadable CSV (%v)", strings.Join(args, " "), err)
	}
	col := func(name string) float64 {
		for i, h := range rows[0] {
			if strings.TrimPrefix(h, "#") == name && i < len(rows[1]) {
				v, _ := strconv.ParseFloat(rows[1][i], 64)
				return v
			}
		}
		return 0
	}
	r.MsgsPerS = col("MsgsPerSec")
	r.Elapsed = time.Duration(col("DurationSecs") * float64(time.Second))
	r.Msgs = int(r.MsgsPerS*r.Elapsed.Seconds() + 0.5)
	r.P50 = time.Duration(col("P50LatencyMicroSecs") * float64(time.Microsecond))
	r.P99 = time.Duration(col("P99LatencyMicroSecs") * float64(time.Microsecond))
	return r, nil
}

// natsCmd runs a nats CLI command (stream add/rm) with a timeout.
func natsCmd(ctx context.Context, natsBin string, args ...string) error {
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	b, err := exec.CommandContext(cctx, natsBin, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("bench: nats %s: %w: %s", strings.Join(args, " "), err, lastLines(string(b), 3))
	}
	return nil
}

// diskFlushes is the number of flush requests completed by the block
// devices (the fdatasync/fsync the kernel passed to the disk), summed over
// whole disks in /proc/diskstats (field 16, kernel >= 5.5). Machine-wide:
// other processes' flushes count too.
func diskFlushes() uint64 {
	b, err := os.ReadFile("/proc/diskstats")
	if err != nil {
		return 0
	}
	var sum uint64
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 18 {
			continue
		}
		name := f[2]
		if strings.HasPrefix(name, "loop") || strings.HasPrefix(name, "ram") || strings.HasPrefix(name, "dm-") {
			continue
		}
		// Whole disks only (vda, sda, nvme0n1), not their partitions.
		if _, err := os.Stat("/sys/block/" + name); err != nil {
			continue
		}
		v, _ := strconv.ParseUint(f[17], 10, 64)
		sum += v
	}
	return sum
}

// jsResult is one JetStream mode's measurements in one round.
type jsResult struct {
	Mode        jsMode
	Async, Sync natsBench
	Consume     natsBench
}

// jsMsgs picks message counts so a run takes about d at the reference
// rates (peers/README.md), or at the rate measured in an earlier round.
func jsMsgs(rate float64, d time.Duration, minN int) int {
	return max(minN, int(rate*d.Seconds()))
}

// jsReference: the peer reference's async and sync publish rates, used
// to size the first round's runs.
var jsReference = map[string][2]float64{
	"r1": {165000, 12000}, "r1-always": {7000, 3500}, "r3": {75000, 3700}, "r3-always": {47000, 1300},
}

// measureJS starts mode's servers, runs `nats bench js pub async`
// (batch 500 outstanding), `pub sync` (one at a time: latency) and a
// durable consume with acks of the async run's messages, and stops the
// servers. prev (may be nil) sizes the runs from an earlier round.
func measureJS(ctx context.Context, peers Peers, dir string, m jsMode, d time.Duration, prev *jsResult) (jsResult, error) {
	res := jsResult{Mode: m}
	dep, err := startJSMode(ctx, peers.NATSServer, filepath.Join(dir, m.Key), m)
	if err != nil {
		return res, err
	}
	defer dep.stop()
	url := dep.URL()
	ref := jsReference[m.Key]
	asyncRate, syncRate := ref[0], ref[1]
	if prev != nil && prev.Async.MsgsPerS > 0 {
		asyncRate, syncRate = prev.Async.MsgsPerS, prev.Sync.MsgsPerS
	}
	// The stream needs a meta leader (R3): retry the first create.
	repl := strconv.Itoa(m.Replicas)
	var lastErr error
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(250 * time.Millisecond) {
		lastErr = natsCmd(ctx, peers.NATS, "-s", url, "stream", "add", "benchstream", "--subjects", "bench.>", "--storage", "file",
			"--replicas", repl, "--defaults")
		if lastErr == nil {
			break
		}
	}
	if lastErr != nil {
		return res, lastErr
	}
	timeout := 2*d + 60*time.Second
	nA := jsMsgs(asyncRate, d, 5000)
	res.Async, err = runNATS(ctx, peers.NATS, dep, dep.dir, timeout, "-s", url, "bench", "js", "pub", "async", "bench.a",
		"--storage", "file", "--replicas", repl, "--msgs", strconv.Itoa(nA), "--batch", "500", "--size", "1024")
	if err != nil {
		return res, err
	}
	res.Consume, err = runNATS(ctx, peers.NATS, dep, dep.dir, timeout, "-s", url, "bench", "js", "consume",
		"--msgs", strconv.Itoa(nA), "--size", "1024")
	if err != nil {
		return res, err
	}
	nS := jsMsgs(syncRate, d/2, 500)
	res.Sync, err = runNATS(ctx, peers.NATS, dep, dep.dir, timeout, "-s", url, "bench", "js", "pub", "sync", "bench.s",
		"--storage", "file", "--replicas", repl, "--msgs", strconv.Itoa(nS), "--size", "1024")
	return res, err
}

// mergeNATS sums runs: rate = messages ÷ elapsed over all; latencies are
// the runs' median-of-percentiles (nats bench reports percentiles only).
func mergeNATS(rs []natsBench) natsBench {
	if len(rs) == 0 {
		return natsBench{}
	}
	out := natsBench{Args: rs[0].Args}
	var p50, p99 []time.Duration
	for _, r := range rs {
		out.Msgs += r.Msgs
		out.Elapsed += r.Elapsed
		out.ClientCPU += r.ClientCPU
		out.ServerCPU += r.ServerCPU
		out.Flushes += r.Flushes
		p50, p99 = append(p50, r.P50), append(p99, r.P99)
	}
	if out.Elapsed > 0 {
		out.MsgsPerS = float64(out.Msgs) / out.Elapsed.Seconds()
	}
	med := func(ds []time.Duration) time.Duration {
		sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
		return ds[len(ds)/2]
	}
	out.P50, out.P99 = med(p50), med(p99)
	return out
}

// ---- the mirror: JetStream's cross-domain replication -------------------

// mirrorResult: a JetStream mirror in a second domain over a leafnode,
// as peers/nats_mirror.sh measures it.
type mirrorResult struct {
	Rate         float64         // the paced publisher's rate
	Lag          []time.Duration // per mirror sample: now − when the source first had that sequence
	Polls        string          // what the /jsz polls saw (mirrorLags.summary)
	BackfillN    int
	BackfillTime time.Duration
	CPU          time.Duration // both servers, during the paced run
	Msgs         int
}

// measureMirror starts domain hub (A, leafnode listener) and domain leaf
// (B, a leafnode to A), creates stream benchstream on A and its mirror on
// B, publishes to A at rate for d (`nats bench js pub async --throughput`)
// while polling both /jsz every 2 ms, then creates a second mirror on B
// and times its backfill of everything A holds.
func measureMirror(ctx context.Context, peers Peers, dir string, rate float64, d time.Duration) (mirrorResult, error) {
	var res mirrorResult
	leaf, err := ports.Free("127.0.0.1")
	if err != nil {
		return res, err
	}
	dep, err := startJS(ctx, peers.NATSServer, dir, []func(string, string) string{
		func(c, h string) string {
			return fmt.Sprintf("server_name: hubA\nlisten: %s\nhttp: %s\njetstream { store_dir: %q, domain: hub, max_file_store: 16GB, max_memory_store: 256MB }\nleafnodes { listen: %s }\n",
				c, h, filepath.Join(dir, "a"), leaf)
		},
		func(c, h string) string {
			return fmt.Sprintf("server_name: leafB\nlisten: %s\nhttp: %s\njetstream { store_dir: %q, domain: leaf, max_file_store: 16GB, max_memory_store: 256MB }\nleafnodes { remotes: [ { url: %q } ] }\n",
				c, h, filepath.Join(dir, "b"), "nats-leaf://"+leaf)
		},
	})
	if err != nil {
		return res, err
	}
	defer dep.stop()
	a, b := dep.servers[0], dep.servers[1]
	mirrorJSON := func(name string) (string, error) {
		f := filepath.Join(dir, name+".json")
		body := fmt.Sprintf(`{"name":%q,"storage":"file","num_replicas":1,"retention":"limits","discard":"old","max_consumers":-1,"max_msgs":-1,"max_bytes":-1,"max_age":0,"max_msgs_per_subject":-1,"max_msg_size":-1,"mirror":{"name":"benchstream","external":{"api":"$JS.hub.API"}}}`, name)
		return f, os.WriteFile(f, []byte(body), 0o644)
	}
	if err := natsCmd(ctx, peers.NATS, "-s", a.URL, "stream", "add", "benchstream", "--subjects", "bench.mx", "--storage", "file", "--replicas", "1", "--defaults"); err != nil {
		return res, err
	}
	m1, err := mirrorJSON("mirr")
	if err != nil {
		return res, err
	}
	// The leafnode may take a moment: retry the mirror's creation.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(250 * time.Millisecond) {
		if err = natsCmd(ctx, peers.NATS, "-s", b.URL, "stream", "add", "--config", m1); err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		return res, err
	}
	// A mirror created before the leafnode carried the hub's API sits
	// idle until its retry, which can be longer than the whole paced run:
	// the run would then see the mirror at 0 throughout and measure no lag
	// (what the committed table showed as 0.00 ms). So one message goes
	// first, and the paced run starts once the mirror has it.
	if err := natsCmd(ctx, peers.NATS, "-s", a.URL, "pub", "bench.mx", "warm-up"); err != nil {
		return res, err
	}
	if err := waitStreamSeq(ctx, b.HTTP, "mirr", 1, 60*time.Second, 20*time.Millisecond); err != nil {
		return res, fmt.Errorf("bench: the JetStream mirror did not take its first message: %w", err)
	}
	n := int(rate * d.Seconds())
	total := n + 1 // with the warm-up message
	pollCtx, stopPoll := context.WithCancel(ctx)
	lagCh := make(chan *mirrorLags, 1)
	go func() { lagCh <- pollMirrorLag(pollCtx, a.HTTP, b.HTTP, "benchstream", "mirr", uint64(total)) }()
	c0 := dep.cpu()
	pub, err := runNATS(ctx, peers.NATS, dep, dir, d+60*time.Second, "-s", a.URL, "bench", "js", "pub", "async", "bench.mx",
		"--msgs", strconv.Itoa(n), "--throughput", strconv.Itoa(int(rate)), "--batch", "100", "--size", "1024")
	// The poller stops once the mirror has all n (or 30 s later).
	var lags *mirrorLags
	select {
	case lags = <-lagCh:
	case <-time.After(30 * time.Second):
		stopPoll()
		lags = <-lagCh
	}
	stopPoll()
	res.Lag, res.Polls = lags.lags, lags.summary()
	if len(res.Lag) == 0 && err == nil {
		err = fmt.Errorf("bench: no JetStream mirror lag samples: %s", res.Polls)
	}
	res.CPU = dep.cpu() - c0
	if err != nil {
		return res, err
	}
	res.Rate, res.Msgs = pub.MsgsPerS, n
	// Backfill: a new mirror of everything A holds.
	m2, err := mirrorJSON("mirr2")
	if err != nil {
		return res, err
	}
	t0 := time.Now()
	if err := natsCmd(ctx, peers.NATS, "-s", b.URL, "stream", "add", "--config", m2); err != nil {
		return res, err
	}
	if err := waitStreamSeq(ctx, b.HTTP, "mirr2", uint64(total), 2*time.Minute, 2*time.Millisecond); err != nil {
		return res, fmt.Errorf("bench: the new JetStream mirror did not backfill: %w", err)
	}
	res.BackfillN, res.BackfillTime = total, time.Since(t0)
	return res, nil
}

// waitStreamSeq polls a server's /jsz every `every` until stream's last
// sequence reaches want, for at most `within`.
func waitStreamSeq(ctx context.Context, httpBase, stream string, want uint64, within, every time.Duration) error {
	for deadline := time.Now().Add(within); ; time.Sleep(every) {
		s, err := jszLastSeq(httpBase, stream)
		if err == nil && s >= want {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not at sequence %d within %v (last poll: seq %d, %v)", want, within, s, err)
		}
	}
}

var jszClient = &http.Client{Timeout: 2 * time.Second}

// jszLastSeq is stream's last sequence number from a server's
// /jsz?streams=true.
func jszLastSeq(httpBase, stream string) (uint64, error) {
	resp, err := jszClient.Get(httpBase + "/jsz?streams=true")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var v struct {
		Accounts []struct {
			Streams []struct {
				Name  string `json:"name"`
				State struct {
					LastSeq uint64 `json:"last_seq"`
				} `json:"state"`
			} `json:"stream_detail"`
		} `json:"account_details"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		return 0, fmt.Errorf("bench: %s/jsz: %w", httpBase, err)
	}
	for _, a := range v.Accounts {
		for _, s := range a.Streams {
			if s.Name == stream {
				return s.State.LastSeq, nil
			}
		}
	}
	return 0, fmt.Errorf("bench: %s/jsz lists no stream %s", httpBase, stream)
}

// seqSample is a source stream's last sequence seen at a time.
type seqSample struct {
	t   time.Time
	seq uint64
}

// sourceTimeOf estimates when the source first held sequence m from its
// samples (ascending seq): between the last sample below m and the first
// at or above it, by linear interpolation — the publisher is paced, so
// sequences grow evenly between two polls. Taking the first sample at or
// above m instead (as the first version did) dates m to the poll that saw
// it, up to a poll period late, so it under-reports the lag by up to
// that much.
func sourceTimeOf(hist []seqSample, m uint64) (time.Time, bool) {
	i := sort.Search(len(hist), func(i int) bool { return hist[i].seq >= m })
	if i == len(hist) {
		return time.Time{}, false
	}
	if i == 0 || hist[i].seq == m {
		return hist[i].t, true
	}
	a, b := hist[i-1], hist[i]
	frac := float64(m-a.seq) / float64(b.seq-a.seq)
	return a.t.Add(time.Duration(frac * float64(b.t.Sub(a.t)))), true
}

// mirrorLags turns polls of a source's and a mirror's last sequence into
// lags: a mirror sample's lag is its time minus when the source reached
// that sequence (sourceTimeOf; never negative). A mirror sample ahead of
// every source poll so far (the mirror trails by less than a poll takes,
// and the mirror is polled after the source) waits for the next source
// poll instead of being dropped: dropping those dropped every sample of a
// mirror that keeps up, and the table said 0.00 ms for want of any.
type mirrorLags struct {
	hist    []seqSample
	waiting []seqSample // mirror samples the source polls do not cover yet
	lags    []time.Duration
	// What the polls saw, for the report when lags come out empty or
	// all zero: polls that failed on each side, samples clamped to 0 (the
	// mirror seen ahead of the source's interpolated time).
	srcFail, dstFail, clamped int
	firstErr                  error
}

func (l *mirrorLags) source(t time.Time, s uint64) {
	if len(l.hist) > 0 && s <= l.hist[len(l.hist)-1].seq {
		return
	}
	l.hist = append(l.hist, seqSample{t, s})
	n := 0
	for _, w := range l.waiting {
		if !l.resolve(w) {
			l.waiting[n] = w
			n++
		}
	}
	l.waiting = l.waiting[:n]
}

func (l *mirrorLags) mirror(t time.Time, m uint64) {
	if m == 0 {
		return
	}
	if w := (seqSample{t, m}); !l.resolve(w) {
		l.waiting = append(l.waiting, w)
	}
}

func (l *mirrorLags) resolve(w seqSample) bool {
	st, ok := sourceTimeOf(l.hist, w.seq)
	if ok {
		d := w.t.Sub(st)
		if d < 0 {
			l.clamped++
		}
		l.lags = append(l.lags, max(0, d))
	}
	return ok
}

// pollMirrorLag polls the source's and the mirror's last sequence every
// 2 ms (as peers/physbench jszlag does) until the mirror has want, and
// returns the lags (mirrorLags).
func pollMirrorLag(ctx context.Context, srcHTTP, dstHTTP, src, dst string, want uint64) *mirrorLags {
	l := &mirrorLags{}
	failed := func(n *int, err error) {
		*n++
		if l.firstErr == nil {
			l.firstErr = err
		}
	}
	pollSource := func() {
		if s, err := jszLastSeq(srcHTTP, src); err != nil {
			failed(&l.srcFail, err)
		} else {
			l.source(time.Now(), s)
		}
	}
	for ctx.Err() == nil {
		pollSource()
		m, err := jszLastSeq(dstHTTP, dst)
		if err != nil {
			failed(&l.dstFail, err)
		} else {
			l.mirror(time.Now(), m)
			if m >= want {
				pollSource() // the last source poll may not cover it yet
				break
			}
		}
		time.Sleep(2 * time.Millisecond)
	}
	return l
}

// summary says what the polls saw.
func (l *mirrorLags) summary() string {
	s := fmt.Sprintf("%d source polls, %d mirror samples (%d still ahead of every source poll, %d clamped to 0), %d source and %d mirror polls failed",
		len(l.hist), len(l.lags)+len(l.waiting), len(l.waiting), l.clamped, l.srcFail, l.dstFail)
	if l.firstErr != nil {
		s += "; first failure: " + l.firstErr.Error()
	}
	return s
}

// ---- pulsar-client-go's perf tool --------------------------------------

// perfResult is pulsar-perf-go produce's second 10 s stats window.
type perfResult struct {
	Command            string
	Rate               float64 // msgs/s
	P50, P95, P99, Max time.Duration
	Err                error
}

var perfStatsRE = regexp.MustCompile(`Publish rate:\s*([0-9.]+) msg/s.*?Latency ms: 50%\s*([0-9.]+)\s*-95%\s*([0-9.]+)\s*- 99%\s*([0-9.]+)\s*- 99.9%\s*[0-9.]+\s*- max\s*([0-9.]+)`)

// runPulsarPerf runs `perf produce` unthrottled (1 KiB, 1 ms batching,
// queue maxPending) against url for 21 s and parses its second stats line
// (it prints one every 10 s; the first holds the start-up).
func runPulsarPerf(ctx context.Context, bin, url, topic string, maxPending int) (perfResult, error) {
	args := []string{"produce", "-u", url, "-r", "0", "-s", "1024", "-q", strconv.Itoa(maxPending), "-b", "1", "--metrics", "-1", topic}
	res := perfResult{Command: "perf " + strings.Join(args, " ")}
	cctx, cancel := context.WithTimeout(ctx, 21*time.Second)
	defer cancel()
	c := exec.CommandContext(cctx, bin, args...)
	c.Cancel = func() error { return c.Process.Signal(os.Interrupt) }
	c.WaitDelay = 5 * time.Second
	var outb strings.Builder
	c.Stdout, c.Stderr = &outb, &outb
	_ = c.Run() // ends by the timeout
	if ctx.Err() != nil {
		return res, ctx.Err()
	}
	text := strings.ReplaceAll(outb.String(), `\n`, " ")
	text = strings.ReplaceAll(text, `\t`, " ")
	ms := perfStatsRE.FindAllStringSubmatch(text, -1)
	if len(ms) < 2 {
		return res, fmt.Errorf("bench: pulsar-perf-go printed %d stats lines in 21 s, want 2: %s", len(ms), lastLines(outb.String(), 4))
	}
	m := ms[1]
	f := func(s string) float64 { v, _ := strconv.ParseFloat(s, 64); return v }
	msd := func(s string) time.Duration { return time.Duration(f(s) * float64(time.Millisecond)) }
	res.Rate, res.P50, res.P95, res.P99, res.Max = f(m[1]), msd(m[2]), msd(m[3]), msd(m[4]), msd(m[5])
	return res, nil
}

// jsSection renders the JetStream rows the broker rounds measured, with
// the exact commands.
func jsSection(sb *strings.Builder, js map[string]*jsAgg, perf perfResult) {
	fmt.Fprintf(sb, "\n### NATS JetStream in the same rounds (nats-server %s, nats CLI %s)\n\n", NATSServerVer, NATSCLIVer)
	fmt.Fprintf(sb, "| mode | pub async msgs/s | async p50 per batch ack | async p99 | pub sync msgs/s | sync p50 | sync p99 | consume msgs/s | server CPU s / M msgs (async) | client CPU s / M msgs | disk flushes/s (machine-wide) | runs |\n")
	fmt.Fprintf(sb, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, m := range jsModes {
		a := js[m.Key]
		if len(a.Async) == 0 {
			fmt.Fprintf(sb, "| %s | n/a (%v) | | | | | | | | | | 0 |\n", m.Name, a.Err)
			continue
		}
		as, sy, co := mergeNATS(a.Async), mergeNATS(a.Sync), mergeNATS(a.Consume)
		fmt.Fprintf(sb, "| %s | %.0f | %v | %v | %.0f | %v | %v | %.0f | %.1f | %.1f | %.0f | %d |\n", m.Name, as.MsgsPerS,
			as.P50.Round(time.Microsecond), as.P99.Round(time.Microsecond), sy.MsgsPerS, sy.P50.Round(time.Microsecond), sy.P99.Round(time.Microsecond),
			co.MsgsPerS, as.ServerCPU.Seconds()/float64(max(1, as.Msgs))*1e6, as.ClientCPU.Seconds()/float64(max(1, as.Msgs))*1e6,
			float64(as.Flushes)/as.Elapsed.Seconds(), len(a.Async))
	}
	fmt.Fprintf(sb, "\nCommands (URL: the server, or the three cluster members comma-separated; N sized to ~the measurement duration from the previous run's rate): "+
		"`nats -s URL stream add benchstream --subjects 'bench.>' --storage file --replicas R --defaults`, "+
		"`nats -s URL bench js pub async bench.a --storage file --replicas R --msgs N --batch 500 --size 1024 --no-progress --csv F`, "+
		"`nats -s URL bench js consume --msgs N --size 1024 --no-progress --csv F` (durable, explicit acks), "+
		"`nats -s URL bench js pub sync bench.s --storage file --replicas R --msgs N --size 1024 --no-progress --csv F`. "+
		"Servers: `listen`/`http` on 127.0.0.1, `jetstream { store_dir, max_file_store: 16GB, max_memory_store: 256MB [, sync_interval: always] }`, R3 with `cluster { name: C3, listen, routes: [all three] }`; "+
		"a fresh data directory per mode and round, deleted after. Rates are nats bench's MsgsPerSec; async latency is per batch of 500 acknowledged (not per message). "+
		"Server CPU: user+system of the nats-server processes (/proc/PID/stat) during the async run; client CPU: the nats process's rusage. "+
		"Disk flushes: flush requests the disks completed during the async run (/proc/diskstats, machine-wide: other processes on this shared machine count too).\n")
	if perf.Err != nil {
		fmt.Fprintf(sb, "\npulsar-perf-go (pulsar-client-go %s perf): not measured (%v).\n", PulsarPerfVer, perf.Err)
	} else if perf.Rate > 0 {
		fmt.Fprintf(sb, "\nSecond load generator, pulsar-client-go %s's own perf tool against the same standalone in round 2: `%s` (21 s; its second 10 s stats window): %.0f msgs/s, latency p50 %v, p95 %v, p99 %v, max %v.\n",
			PulsarPerfVer, perf.Command, perf.Rate, perf.P50, perf.P95, perf.P99, perf.Max)
	}
}
