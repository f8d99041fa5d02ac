package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/meridian-mq/meridian/bookie"
	"github.com/meridian-mq/meridian/bookie/autorecovery"
	"github.com/meridian-mq/meridian/bookie/ledger"
	"github.com/meridian-mq/meridian/broker"
	"github.com/meridian-mq/meridian/cluster"
	"github.com/meridian-mq/meridian/rack"
)

// RecoveryOptions configures RunRecovery.
type RecoveryOptions struct {
	// Out: also write the markdown table to this file ("" = stdout only).
	Out string
	// Dir: where the rigs' data go. Default: a temp dir under ".".
	Dir string
	// DataMiB: payload written into closed ledgers (E=Qw=3, Qa=2) before
	// the loss; the lost bookie holds about 3/6 of it. Default 96.
	DataMiB int
	// EntryBytes: size of those entries. Default 16 KiB (a broker batch).
	EntryBytes int
	// ThrottleMiBps: the throttled run's copy cap. Default 8.
	ThrottleMiBps float64
	// Rate: publishes per second during the measurement. Default 300.
	Rate float64
	// Size: publish payload bytes. Default 1024.
	Size int
	// Baseline: how long the publish latency is measured before the loss.
	// Default 10 s.
	Baseline time.Duration
	// Rounds: each round runs the throttled and the unthrottled rig (in
	// alternating order). Default 1.
	Rounds int
	// Command: how the run was invoked, printed above the table.
	Command string
}

func (o *RecoveryOptions) defaults() {
	if o.DataMiB == 0 {
		o.DataMiB = 96
	}
	if o.EntryBytes == 0 {
		o.EntryBytes = 16 << 10
	}
	if o.ThrottleMiBps == 0 {
		o.ThrottleMiBps = 8
	}
	if o.Rate == 0 {
		o.Rate = 300
	}
	if o.Size == 0 {
		o.Size = 1024
	}
	if o.Baseline == 0 {
		o.Baseline = 10 * time.Second
	}
	if o.Rounds == 0 {
		o.Rounds = 1
	}
	if o.Command == "" {
		o.Command = "meridian bench recovery"
	}
}

// recoveryRun is one rig's figures.
type recoveryRun struct {
	name        string
	throttle    float64 // MiB/s, <= 0 unlimited
	heldBytes   int64   // payload the lost bookie held
	detect      time.Duration
	full        time.Duration // loss → no marker left
	copyElapsed time.Duration // first marker → no marker left
	copied      int64         // payload bytes copied
	before      Result
	during      Result
}

// RunRecovery measures auto-recovery on a rig in this process: a real etcd,
// six bookies on three racks (Pebble on disk, gRPC on loopback), a broker
// and the unmodified pulsar-client-go publishing at a fixed rate; an
// auditor and two workers. Each run writes DataMiB into closed ledgers,
// measures publish latency for Baseline, then stops one bookie that holds
// data but not the topic's ledger, and measures the time until every
// fragment is back at its write quorum, the copy throughput, and the
// publish latency while copying. It runs once with the copy throttled at
// ThrottleMiBps and once unthrottled, on fresh rigs, and prints one table.
func RunRecovery(ctx context.Context, o RecoveryOptions, out io.Writer) error {
	o.defaults()
	dir, cleanup, err := workDir(o.Dir, "recovery")
	if err != nil {
		return err
	}
	defer cleanup()
	var runs []recoveryRun
	for round := range o.Rounds {
		order := []float64{o.ThrottleMiBps, -1}
		if round%2 == 1 {
			slices.Reverse(order)
		}
		for _, th := range order {
			name := fmt.Sprintf("throttled %.0f MiB/s", th)
			if th <= 0 {
				name = "unthrottled"
			}
			fmt.Fprintf(out, "round %d/%d: %s ...\n", round+1, o.Rounds, name)
			r, err := recoveryOnce(ctx, o, filepath.Join(dir, fmt.Sprintf("r%d-%d", round, len(runs))), th)
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			r.name = name
			runs = append(runs, r)
			fmt.Fprintf(out, "  lost bookie held %.1f MiB; fully re-replicated %s after the loss; copy %.1f MiB/s; publish p99 %s before, %s during\n",
				float64(r.heldBytes)/(1<<20), r.full.Round(time.Millisecond), float64(r.copied)/(1<<20)/r.copyElapsed.Seconds(),
				r.before.pct(0.99).Round(time.Microsecond), r.during.pct(0.99).Round(time.Microsecond))
		}
	}
	var sb strings.Builder
	host, _ := os.Hostname()
	fmt.Fprintf(&sb, "## Auto-recovery: re-replication after a bookie loss\n\n")
	fmt.Fprintf(&sb, "Run %s on %s (%d cores, %s/%s); `%s`: in one process a real etcd, 6 bookies on 3 racks (Pebble, fsync, gRPC on loopback, one disk), a broker and pulsar-client-go publishing %.0f msg/s of %d B unbatched; %d MiB written into closed E=Qw=3 Qa=2 ledgers of %d KiB entries; one bookie holding data (not the topic's ledger) is stopped; an auditor (lost-bookie delay 0) and 2 workers re-replicate. Time to full re-replication runs from the loss to no marker left; copy throughput is payload copied over the copy's duration; publish latency from SendAsync to its receipt, %s before the loss and during the copy.\n\n",
		time.Now().UTC().Format("2006-01-02 15:04 MST"), host, runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, o.Command, o.Rate, o.Size, o.DataMiB, o.EntryBytes>>10, o.Baseline)
	fmt.Fprintf(&sb, "| run | data on the lost bookie | detection | time to full re-replication | copy throughput | publish p50 / p99 before | p50 / p99 during | p99 during / before |\n")
	fmt.Fprintf(&sb, "|---|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range runs {
		fmt.Fprintf(&sb, "| %s | %.1f MiB | %s | %s | %.1f MiB/s | %s / %s | %s / %s | %.2f |\n", r.name, float64(r.heldBytes)/(1<<20),
			r.detect.Round(time.Millisecond), r.full.Round(100*time.Millisecond), float64(r.copied)/(1<<20)/r.copyElapsed.Seconds(),
			r.before.pct(0.5).Round(time.Microsecond), r.before.pct(0.99).Round(time.Microsecond),
			r.during.pct(0.5).Round(time.Microsecond), r.during.pct(0.99).Round(time.Microsecond),
			float64(r.during.pct(0.99))/float64(max(r.before.pct(0.99), 1)))
	}
	fmt.Fprintf(&sb, "\nThe ratio compares the publish p99 while copying with the p99 of the same rig just before the loss. The throttle is per process (its workers share it).\n")
	fmt.Fprint(out, sb.String())
	if o.Out != "" {
		return writeReport(o.Out, sb.String())
	}
	return nil
}

// recoveryOnce runs one rig.
func recoveryOnce(ctx context.Context, o RecoveryOptions, dir string, throttleMiBps float64) (recoveryRun, error) {
	run := recoveryRun{throttle: throttleMiBps}
	quiet := slog.New(slog.DiscardHandler)
	ca, _ := freeAddr()
	pa, _ := freeAddr()
	e, err := cluster.StartEtcd(cluster.EtcdConfig{Name: "bench", DataDir: filepath.Join(dir, "etcd"), ClientURL: "http://" + ca, PeerURL: "http://" + pa})
	if err != nil {
		return run, err
	}
	defer e.Close()
	store, err := cluster.Connect(ctx, cluster.StoreConfig{Endpoints: []string{e.ClientURL()}, Prefix: "/bench"})
	if err != nil {
		return run, err
	}
	defer store.Close()
	servers := map[string]*bookie.Server{}
	defer func() {
		for _, s := range servers {
			s.Close()
		}
	}()
	for i := 1; i <= 6; i++ {
		c := bookie.DefaultConfig()
		c.ID = fmt.Sprintf("b%d", i)
		c.Region, c.Rack = "bench", fmt.Sprintf("r%d", (i-1)%3+1)
		c.ListenAddr = "127.0.0.1:0"
		c.DataDir = filepath.Join(dir, c.ID)
		c.Logger = quiet
		s, err := bookie.New(c, cluster.NewBookieRegistry(store, 0))
		if err != nil {
			return run, err
		}
		servers[c.ID] = s
		if err := s.Start(); err != nil {
			return run, err
		}
	}
	view, err := cluster.WatchBookies(ctx, store)
	if err != nil {
		return run, err
	}
	defer view.Close()
	for len(view.Bookies(true)) < 6 {
		time.Sleep(10 * time.Millisecond)
	}
	lc, err := ledger.New(ledger.Config{Store: store, Bookies: ledger.ViewSource{View: view}, Region: "bench", Logger: quiet})
	if err != nil {
		return run, err
	}
	defer lc.Close()

	// The data set: closed ledgers of 4 MiB.
	payload := make([]byte, o.EntryBytes)
	for i := range payload {
		payload[i] = byte(i * 13)
	}
	perLedger := max(1, (4<<20)/o.EntryBytes)
	total := (o.DataMiB << 20) / o.EntryBytes
	for written := 0; written < total; {
		w, err := lc.Create(ctx, ledger.CreateOptions{EnsembleSize: 3, WriteQuorum: 3, AckQuorum: 2, Placement: rack.DefaultPolicy()})
		if err != nil {
			return run, err
		}
		var wg sync.WaitGroup
		var mu sync.Mutex
		var werr error
		sem := make(chan struct{}, 64)
		for j := 0; j < perLedger && written < total; j++ {
			written++
			wg.Add(1)
			sem <- struct{}{}
			w.AppendAsync(payload, func(_ int64, err error) {
				defer wg.Done()
				<-sem
				if err != nil {
					mu.Lock()
					werr = errors.Join(werr, err)
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if werr != nil {
			return run, werr
		}
		if err := w.Close(ctx); err != nil {
			return run, err
		}
	}

	bc := broker.Config{Cluster: "bench", ListenAddr: "127.0.0.1:0", AdminAddr: "", Store: store, Ledgers: lc, Logger: quiet}
	bc.ManagedLedger.EnsembleSize, bc.ManagedLedger.WriteQuorum, bc.ManagedLedger.AckQuorum = 3, 3, 2
	brk, err := broker.New(bc)
	if err != nil {
		return run, err
	}
	if err := brk.Start(); err != nil {
		return run, err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		brk.Close(cctx)
		cancel()
	}()
	client, err := newPulsarClient(brk.ServiceURL())
	if err != nil {
		return run, err
	}
	defer client.Close()
	topic := fmt.Sprintf("persistent://public/default/bench-recovery-%d", time.Now().UnixNano())
	prod, err := client.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true, MaxPendingMessages: 10000})
	if err != nil {
		return run, err
	}
	defer prod.Close()
	pub := startPublisher(prod, o.Rate, o.Size)
	defer pub.stop()

	// Auto-recovery: delay 0, so the figures are the copy, not the wait.
	cfg := autorecovery.DefaultConfig()
	cfg.Store, cfg.Bookies, cfg.Logger = store, view, quiet
	if os.Getenv("MERIDIAN_BENCH_LOG") != "" {
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	cfg.LostBookieDelay = 0
	cfg.CheckInterval = 200 * time.Millisecond
	cfg.PollInterval = 200 * time.Millisecond
	cfg.ThrottleBytesPerSec = int64(throttleMiBps * (1 << 20))
	if throttleMiBps <= 0 {
		cfg.ThrottleBytesPerSec = -1
	}
	cfg.Throttle = autorecovery.NewThrottle(cfg.ThrottleBytesPerSec)
	cfg.Metrics = autorecovery.NewMetrics("bench")
	aud, err := autorecovery.NewAuditor(cfg, "bench")
	if err != nil {
		return run, err
	}
	rctx, rstop := context.WithCancel(ctx)
	defer rstop()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer rstop()
	wg.Go(func() { aud.Run(rctx) })
	var workers []*autorecovery.Worker
	for i := range 2 {
		w, err := autorecovery.NewWorker(cfg, fmt.Sprintf("w%d", i), lc)
		if err != nil {
			return run, err
		}
		workers = append(workers, w)
		wg.Go(func() { w.Run(rctx) })
	}

	// Warm up, then the baseline.
	time.Sleep(2 * time.Second)
	pub.take()
	select {
	case <-ctx.Done():
		return run, ctx.Err()
	case <-time.After(o.Baseline):
	}
	run.before = pub.take()

	// The victim: holds data, not in the topic's ledgers.
	ids, err := ledger.ListLedgers(ctx, store)
	if err != nil {
		return run, err
	}
	held := map[string]int64{}
	busy := map[string]bool{}
	for _, id := range ids {
		m, err := ledger.ReadMetadata(ctx, store, id)
		if err != nil {
			continue
		}
		for _, f := range m.Meta.Fragments {
			for _, b := range f.Ensemble {
				if m.Meta.Custom["managed-ledger"] != "" {
					busy[b.Id] = true
				} else {
					held[b.Id] += m.Meta.Length
				}
			}
		}
	}
	victim := ""
	for id, n := range held {
		if !busy[id] && (victim == "" || n > held[victim]) {
			victim = id
		}
	}
	if victim == "" {
		return run, errors.New("every bookie holds the topic's ledger; cannot pick a victim")
	}
	run.heldBytes = held[victim]
	lost := time.Now()
	vs := servers[victim]
	delete(servers, victim)
	closed := make(chan struct{})
	go func() { vs.Close(); close(closed) }() // deregisters at once (delay 0: lost at the next check), then drains its streams
	defer func() { <-closed }()
	var firstMarker time.Time
	for {
		ms, err := autorecovery.ListMarkers(ctx, store)
		if err != nil {
			return run, err
		}
		if len(ms) > 0 && firstMarker.IsZero() {
			firstMarker = time.Now()
			run.detect = firstMarker.Sub(lost)
		}
		if len(ms) == 0 && !firstMarker.IsZero() {
			break
		}
		if time.Since(lost) > 30*time.Minute {
			return run, errors.New("not fully re-replicated after 30 minutes")
		}
		select {
		case <-ctx.Done():
			return run, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	run.full = time.Since(lost)
	run.copyElapsed = time.Since(firstMarker)
	run.during = pub.take()
	for _, w := range workers {
		run.copied += w.Stats().Bytes
	}
	if run.during.Errors > 0 {
		return run, fmt.Errorf("%d publishes failed during the copy: %v", run.during.Errors, run.during.FirstErr)
	}
	return run, nil
}

// publisher sends at a fixed rate and collects latencies; take returns
// what was collected since the previous take.
type publisher struct {
	mu   sync.Mutex
	cur  Result
	quit chan struct{}
	done chan struct{}
	wg   sync.WaitGroup
}

func startPublisher(prod pulsar.Producer, rate float64, size int) *publisher {
	p := &publisher{quit: make(chan struct{}), done: make(chan struct{}), cur: Result{Name: "publish"}}
	payload := make([]byte, size)
	go func() {
		defer close(p.done)
		interval := time.Duration(float64(time.Second) / rate)
		next := time.Now()
		for {
			next = next.Add(interval)
			select {
			case <-p.quit:
				return
			case <-time.After(time.Until(next)):
			}
			t := time.Now()
			p.wg.Add(1)
			prod.SendAsync(context.Background(), &pulsar.ProducerMessage{Payload: payload}, func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
				defer p.wg.Done()
				lat := time.Since(t)
				p.mu.Lock()
				defer p.mu.Unlock()
				if err != nil {
					p.cur.Errors++
					if p.cur.FirstErr == nil {
						p.cur.FirstErr = err
					}
					return
				}
				p.cur.Ops++
				p.cur.Bytes += int64(size)
				p.cur.Lat = append(p.cur.Lat, lat)
			})
		}
	}()
	return p
}

func (p *publisher) take() Result {
	p.mu.Lock()
	defer p.mu.Unlock()
	r := p.cur
	p.cur = Result{Name: "publish"}
	return r
}

func (p *publisher) stop() {
	select {
	case <-p.quit:
	default:
		close(p.quit)
	}
	<-p.done
	ch := make(chan struct{})
	go func() { p.wg.Wait(); close(ch) }()
	select {
	case <-ch:
	case <-time.After(30 * time.Second):
	}
}
