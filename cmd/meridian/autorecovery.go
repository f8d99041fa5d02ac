package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/meridian-mq/meridian/bookie/autorecovery"
	"github.com/meridian-mq/meridian/bookie/ledger"
	"github.com/meridian-mq/meridian/cluster"
	"github.com/meridian-mq/meridian/internal/config"
	"github.com/meridian-mq/meridian/internal/healthz"
	"github.com/meridian-mq/meridian/internal/httpserve"
	"github.com/meridian-mq/meridian/internal/ratelog"
	"github.com/meridian-mq/meridian/internal/tlsutil"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// Auto-recovery runs, by default, inside every broker process (`meridian
// broker`, hence `meridian up`) and inside `meridian standalone`: each is a
// candidate for the region's auditor (one is elected through etcd) and runs
// re-replication workers, which coordinate through etcd. `meridian
// autorecovery` runs the same thing as a process of its own, for
// deployments that keep copying off the brokers (then start brokers with
// --autorecovery=false).

// recoveryFlags are auto-recovery's settings, shared by the broker,
// standalone and autorecovery commands.
type recoveryFlags struct {
	enabled bool
	delay   time.Duration
	scrub   time.Duration
	mbps    float64
	workers int
}

// register adds the flags; prefix is "" for `meridian autorecovery` and
// "recovery-" where they sit beside other roles' flags.
func (r *recoveryFlags) register(f *pflag.FlagSet, prefix string, withEnable bool) {
	config.Group(f, "recovery", func() {
		if withEnable {
			f.BoolVar(&r.enabled, "autorecovery", true, "run auto-recovery in this process (an auditor candidate and re-replication workers)")
		}
		f.DurationVar(&r.delay, "lost-bookie-delay", 60*time.Second, "how long one bookie may be gone (registration expired, gossip failed) before its fragments are re-replicated; two or more gone together: at once")
		f.DurationVar(&r.scrub, prefix+"scrub-interval", time.Hour, "how often the auditor scans every ledger for fragments below their write quorum or breaking the placement rule")
		f.Float64Var(&r.mbps, prefix+"throttle-mbps", 50, "re-replication copy cap of this process in MiB/s (0: unlimited)")
		f.IntVar(&r.workers, prefix+"workers", 2, "re-replication workers in this process")
	})
	if withEnable {
		config.Bind(f, "autorecovery", "recovery.enabled")
	}
}

// config builds the autorecovery.Config.
func (r recoveryFlags) config(store *cluster.Store, view *cluster.BookieView, alive func(string) bool, metrics *autorecovery.Metrics, log *slog.Logger) (autorecovery.Config, error) {
	cfg := autorecovery.DefaultConfig()
	cfg.Store, cfg.Bookies, cfg.Alive, cfg.Metrics = store, view, alive, metrics
	cfg.Logger = log.With("component", "autorecovery")
	cfg.LostBookieDelay = r.delay
	if r.scrub > 0 {
		cfg.ScrubInterval = r.scrub
	}
	cfg.ThrottleBytesPerSec = int64(r.mbps * (1 << 20))
	if r.mbps <= 0 {
		cfg.ThrottleBytesPerSec = -1
	}
	cfg.Throttle = autorecovery.NewThrottle(cfg.ThrottleBytesPerSec) // shared by all workers of the process
	return cfg, cfg.Validate()
}

// runAutorecovery starts an auditor candidate and the workers on ctx; wait
// blocks until they stopped (after ctx ends). health, if set, gets their
// loops and readiness checks.
func runAutorecovery(ctx context.Context, cfg autorecovery.Config, id string, workers int, client *ledger.Client, health *healthz.Checker) (wait func(), err error) {
	cfg.ScrubReader = client // the scrub samples each replica's data too
	ids := []string{"auditor"}
	for i := range max(workers, 1) {
		ids = append(ids, fmt.Sprintf("%s/w%d", id, i))
	}
	if health != nil {
		cfg.Heartbeat = recoveryLoops(health, cfg, ids)
	}
	aud, err := autorecovery.NewAuditor(cfg, id)
	if err != nil {
		return nil, err
	}
	var ws []*autorecovery.Worker
	for _, wid := range ids[1:] {
		w, err := autorecovery.NewWorker(cfg, wid, client)
		if err != nil {
			return nil, err
		}
		ws = append(ws, w)
	}
	if health != nil {
		recoveryReadiness(health, cfg.Store, aud, ws)
	}
	var wg sync.WaitGroup
	wg.Go(func() { aud.Run(ctx) })
	for _, w := range ws {
		wg.Go(func() { w.Run(ctx) })
	}
	return wg.Wait, nil
}

// recoveryLoops registers the auditor's loop and each worker's (named
// ids: "auditor", then the workers' ids) on h, and returns the heartbeat
// that turns them. The bounds leave room for what a turn may wait on: the
// auditor's detection step every CheckInterval, an etcd call bounded by
// the election session (ElectionTTL); a worker's pass, an entry copy
// bounded by the ledger client's read and add timeouts, and a lease
// bounded by LockTTL.
func recoveryLoops(h *healthz.Checker, cfg autorecovery.Config, ids []string) func(string) {
	d := autorecovery.DefaultConfig()
	check, election, lock := cmp.Or(cfg.CheckInterval, d.CheckInterval), cmp.Or(cfg.ElectionTTL, d.ElectionTTL), cmp.Or(cfg.LockTTL, d.LockTTL)
	turns := map[string]func(){}
	for i, id := range ids {
		name, bound := fmt.Sprintf("worker-loop-%d", i-1), lock+2*time.Minute
		if id == "auditor" {
			name, bound = "auditor-loop", 2*check+election+30*time.Second
		}
		turns[id] = h.Loop(name, bound)
	}
	return func(loop string) {
		if turn := turns[loop]; turn != nil {
			turn()
		}
	}
}

// recoveryReadiness: ready when the region's etcd answers a read, the
// auditor takes part in the election (elected, or standing by with a live
// session) and every worker holds its lease.
func recoveryReadiness(h *healthz.Checker, store *cluster.Store, aud *autorecovery.Auditor, ws []*autorecovery.Worker) {
	h.Ready("metadata-store", func(ctx context.Context) error {
		_, err := store.Get(ctx, "/healthz-probe")
		if errors.Is(err, cluster.ErrNotFound) {
			return nil
		}
		return err
	})
	h.Ready("election", func(context.Context) error {
		if !aud.InElection() {
			return errors.New("the auditor has no election session")
		}
		return nil
	})
	h.Ready("worker-lease", func(context.Context) error {
		for _, w := range ws {
			if !w.HasLease() {
				return fmt.Errorf("worker %s holds no lease", w.ID())
			}
		}
		return nil
	})
}

func processID() string {
	h, _ := os.Hostname()
	return fmt.Sprintf("%s-%d", h, os.Getpid())
}

// newAutorecoveryCmd runs a region's auto-recovery as a process of its own.
func newAutorecoveryCmd() *cobra.Command {
	var md metadataFlags
	var id, metricsAddr string
	var rf recoveryFlags
	var gossip gossipFlags
	var sec securityFlags
	cmd := &cobra.Command{
		Use:   "autorecovery",
		Short: "Run auto-recovery: detect lost bookies and re-replicate their fragments (brokers run it too, by default)",
	}
	f := cmd.Flags()
	md.register(f, "region whose bookies and ledgers to look after", false)
	config.Group(f, "autorecovery", func() {
		f.StringVar(&id, "id", "", "name of this process in the auditor election (default: host-pid)")
		f.StringVar(&metricsAddr, "metrics", autorecovery.DefaultMetricsAddr, "HTTP listen address of Prometheus /metrics and the probes /healthz (the auditor's and workers' loops turn), /readyz (etcd answers, the auditor is in the election, every worker holds its lease) and /status.html (empty: off)")
	})
	config.Bind(f, "metrics", "autorecovery.metrics_addr")
	rf.register(f, "", false)
	gossip.register(cmd)
	sec.registerTLS(cmd)
	withConfig(cmd, func(eff *config.Effective) error {
		return validateAll(eff, rules(logRules, regionRules, gossipRules, recoveryRules, map[string]config.Rule{
			"autorecovery.metrics_addr": config.HostPort(true),
		}))
	}, func(cmd *cobra.Command, _ *config.Effective) error {
		if id == "" {
			id = processID()
		}
		region := md.region
		log := logger()
		ctx, stop := signalContext()
		defer stop()
		secfc := sec.settings()
		tlsSrc, err := secfc.tlsSource()
		if err != nil {
			return err
		}
		if err := ownRoles(tlsSrc, "autorecovery", tlsutil.RoleAutorecovery, tlsutil.RoleBroker); err != nil {
			return err
		}
		store, err := secfc.connectStore(ctx, md.endpoints(), md.regionPrefix(), tlsSrc)
		if err != nil {
			return err
		}
		defer store.Close()
		view, err := cluster.WatchBookies(ctx, store)
		if err != nil {
			return err
		}
		defer view.Close()
		var alive func(string) bool
		m, err := gossip.start(id, cluster.RoleAutorecovery, region, "", "", "", log)
		if err != nil {
			return err
		}
		if m != nil {
			defer m.Shutdown()
			alive = autorecovery.GossipAlive(m)
		}
		client, err := ledger.New(ledger.Config{Store: store, Bookies: ledger.ViewSource{View: view}, Region: region, Logger: log, DialOptions: ledgerDialOptions(tlsSrc)})
		if err != nil {
			return err
		}
		defer client.Close()
		metrics := autorecovery.NewMetrics(region)
		health := healthz.New()
		if metricsAddr != "" {
			lis, err := net.Listen("tcp", metricsAddr)
			if err != nil {
				return err
			}
			mux := http.NewServeMux()
			mux.Handle("/metrics", promhttp.HandlerFor(prometheus.Gatherers{metrics.Gatherer(), processMetrics()}, promhttp.HandlerOpts{}))
			rl := ratelog.New(log, time.Minute)
			health.Register(mux, func(endpoint string, err error) {
				rl.Log(slog.LevelWarn, endpoint, "autorecovery: health probe answered red", "endpoint", endpoint, "err", err)
			})
			srv := httpserve.New(mux, httpserve.Options{Logger: log})
			go srv.Serve(lis)
			defer srv.Close()
		}
		cfg, err := rf.config(store, view, alive, metrics, log)
		if err != nil {
			return err
		}
		wait, err := runAutorecovery(ctx, cfg, id, rf.workers, client, health)
		if err != nil {
			return err
		}
		log.Info("autorecovery running", "id", id, "region", region, "lost_bookie_delay", rf.delay, "throttle_mbps", rf.mbps, "workers", rf.workers, "gossip", m != nil)
		<-ctx.Done()
		health.Drain("stopping")
		wait()
		if m != nil {
			lctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			m.Leave(lctx)
			cancel()
		}
		return nil
	})
	return cmd
}

// processMetrics are the Go runtime and process collectors of a process
// whose role's registry lacks them (the broker's and the bookie's have
// them).
func processMetrics() prometheus.Gatherer {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}
