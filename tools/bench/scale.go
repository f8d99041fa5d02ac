package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/meridian-mq/meridian/broker/codec"
	pb "github.com/meridian-mq/meridian/proto/pulsarpb"
	"github.com/meridian-mq/meridian/tools/up"
)

// ScaleOptions configures RunScale (make bench-scale).
type ScaleOptions struct {
	Out    string
	Dir    string
	Topics int // default 100,000
	// Conns: raw Pulsar-protocol connections creating topics in parallel
	// (default 64); each keeps its topics' consumers open.
	Conns int
	// TimeBox: creation stops after it, and the report says how far it got
	// (default 25 min).
	TimeBox time.Duration
	// ProfileDir: where the idle broker's profiles go ("" = none).
	ProfileDir  string
	MeridianBin string
	Command     string
}

// rawConn is a minimal Pulsar-protocol client over broker/codec: one TCP
// connection, requests matched to responses by request id (and send
// receipts by producer id). It exists so that 100,000 topics with a
// producer and a consumer each do not need 100,000 Go-client objects (the
// client's per-producer and per-consumer goroutines and queues would
// dominate the load side's memory).
type rawConn struct {
	c    net.Conn
	wmu  sync.Mutex
	next atomic.Uint64

	mu      sync.Mutex
	waiting map[uint64]chan *pb.BaseCommand // by request id; receipts by 1<<63|producer id
	err     error
}

func dialRaw(addr string) (*rawConn, error) {
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return nil, err
	}
	rc := &rawConn{c: c, waiting: map[uint64]chan *pb.BaseCommand{}}
	dec := codec.NewDecoder(c, 0)
	if err := rc.write(&pb.BaseCommand{Type: pb.BaseCommand_CONNECT.Enum(), Connect: &pb.CommandConnect{
		ClientVersion: proto.String("meridian-bench-scale"), ProtocolVersion: proto.Int32(19)}}, nil); err != nil {
		c.Close()
		return nil, err
	}
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	f, err := dec.Next()
	if err != nil || f.Cmd.GetType() != pb.BaseCommand_CONNECTED {
		c.Close()
		return nil, fmt.Errorf("bench: connect: %v %v", f.Cmd, err)
	}
	_ = c.SetReadDeadline(time.Time{})
	go rc.readLoop(dec)
	return rc, nil
}

func (rc *rawConn) write(cmd *pb.BaseCommand, payload []byte) error {
	var b []byte
	var err error
	if payload != nil {
		b, err = codec.AppendPayloadCommand(nil, cmd, nil, payload)
	} else {
		b, err = codec.AppendCommand(nil, cmd)
	}
	if err != nil {
		return err
	}
	rc.wmu.Lock()
	defer rc.wmu.Unlock()
	_ = rc.c.SetWriteDeadline(time.Now().Add(30 * time.Second))
	_, err = rc.c.Write(b)
	return err
}

func (rc *rawConn) readLoop(dec *codec.Decoder) {
	for {
		f, err := dec.Next()
		if err != nil {
			rc.mu.Lock()
			rc.err = err
			for _, ch := range rc.waiting {
				close(ch)
			}
			rc.waiting = map[uint64]chan *pb.BaseCommand{}
			rc.mu.Unlock()
			return
		}
		var key uint64
		switch f.Cmd.GetType() {
		case pb.BaseCommand_PING:
			_ = rc.write(&pb.BaseCommand{Type: pb.BaseCommand_PONG.Enum(), Pong: &pb.CommandPong{}}, nil)
			continue
		case pb.BaseCommand_PRODUCER_SUCCESS:
			key = f.Cmd.ProducerSuccess.GetRequestId()
		case pb.BaseCommand_SUCCESS:
			key = f.Cmd.Success.GetRequestId()
		case pb.BaseCommand_ERROR:
			key = f.Cmd.Error.GetRequestId()
		case pb.BaseCommand_LOOKUP_RESPONSE:
			key = f.Cmd.LookupTopicResponse.GetRequestId()
		case pb.BaseCommand_SEND_RECEIPT:
			key = 1<<63 | f.Cmd.SendReceipt.GetProducerId()
		case pb.BaseCommand_SEND_ERROR:
			key = 1<<63 | f.Cmd.SendError.GetProducerId()
		default:
			continue
		}
		rc.mu.Lock()
		ch := rc.waiting[key]
		delete(rc.waiting, key)
		rc.mu.Unlock()
		if ch != nil {
			ch <- f.Cmd
		}
	}
}

// call writes cmd and waits for the response keyed key.
func (rc *rawConn) call(key uint64, cmd *pb.BaseCommand, payload []byte) (*pb.BaseCommand, error) {
	ch := make(chan *pb.BaseCommand, 1)
	rc.mu.Lock()
	if rc.err != nil {
		rc.mu.Unlock()
		return nil, rc.err
	}
	rc.waiting[key] = ch
	rc.mu.Unlock()
	if err := rc.write(cmd, payload); err != nil {
		return nil, err
	}
	select {
	case r, ok := <-ch:
		if !ok {
			return nil, fmt.Errorf("bench: connection closed: %v", rc.err)
		}
		if r.GetType() == pb.BaseCommand_ERROR {
			return r, fmt.Errorf("bench: %s: %s", r.Error.GetError(), r.Error.GetMessage())
		}
		if r.GetType() == pb.BaseCommand_SEND_ERROR {
			return r, fmt.Errorf("bench: send: %s: %s", r.SendError.GetError(), r.SendError.GetMessage())
		}
		return r, nil
	case <-time.After(60 * time.Second):
		return nil, errors.New("bench: no response within 60 s")
	}
}

// createTopic gives topic a ledger (a producer sends one message; the
// managed ledger opens its first ledger on the first append) and a
// durable subscription with a consumer that stays connected (no permits:
// no message is delivered).
func (rc *rawConn) createTopic(topic string, id uint64) error {
	req := rc.next.Add(1)
	r, err := rc.call(req, &pb.BaseCommand{Type: pb.BaseCommand_PRODUCER.Enum(), Producer: &pb.CommandProducer{
		Topic: proto.String(topic), ProducerId: proto.Uint64(id), RequestId: proto.Uint64(req)}}, nil)
	if err != nil {
		return fmt.Errorf("producer: %w", err)
	}
	msg, err := codec.EncodeMessage(&pb.MessageMetadata{ProducerName: proto.String(r.ProducerSuccess.GetProducerName()), SequenceId: proto.Uint64(0),
		PublishTime: proto.Uint64(uint64(time.Now().UnixMilli()))}, []byte("x"))
	if err != nil {
		return err
	}
	if _, err := rc.call(1<<63|id, &pb.BaseCommand{Type: pb.BaseCommand_SEND.Enum(), Send: &pb.CommandSend{
		ProducerId: proto.Uint64(id), SequenceId: proto.Uint64(0), NumMessages: proto.Int32(1)}}, msg); err != nil {
		return fmt.Errorf("send: %w", err)
	}
	req = rc.next.Add(1)
	if _, err := rc.call(req, &pb.BaseCommand{Type: pb.BaseCommand_CLOSE_PRODUCER.Enum(), CloseProducer: &pb.CommandCloseProducer{
		ProducerId: proto.Uint64(id), RequestId: proto.Uint64(req)}}, nil); err != nil {
		return fmt.Errorf("close producer: %w", err)
	}
	req = rc.next.Add(1)
	if _, err := rc.call(req, &pb.BaseCommand{Type: pb.BaseCommand_SUBSCRIBE.Enum(), Subscribe: &pb.CommandSubscribe{
		Topic: proto.String(topic), Subscription: proto.String("s"), SubType: pb.CommandSubscribe_Exclusive.Enum(),
		ConsumerId: proto.Uint64(id), RequestId: proto.Uint64(req)}}, nil); err != nil {
		return fmt.Errorf("subscribe: %w", err)
	}
	return nil
}

func (rc *rawConn) lookup(topic string) error {
	req := rc.next.Add(1)
	r, err := rc.call(req, &pb.BaseCommand{Type: pb.BaseCommand_LOOKUP.Enum(), LookupTopic: &pb.CommandLookupTopic{
		Topic: proto.String(topic), RequestId: proto.Uint64(req)}}, nil)
	if err != nil {
		return err
	}
	if r.LookupTopicResponse.GetResponse() == pb.CommandLookupTopicResponse_Failed {
		return fmt.Errorf("lookup failed: %s", r.LookupTopicResponse.GetMessage())
	}
	return nil
}

func rssBytes(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "VmRSS:") {
			f := strings.Fields(l)
			if len(f) >= 2 {
				kb, _ := strconv.ParseInt(f[1], 10, 64)
				return kb << 10
			}
		}
	}
	return 0
}

func threads(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "Threads:") {
			n, _ := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(l, "Threads:")))
			return n
		}
	}
	return 0
}

// goroutines reads the count from the process's pprof goroutine profile.
func goroutines(addr string) int {
	resp, err := jszClient.Get("http://" + addr + "/debug/pprof/goroutine?debug=1")
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	b := make([]byte, 128)
	n, _ := io.ReadFull(resp.Body, b)
	var g int
	fmt.Sscanf(string(b[:n]), "goroutine profile: total %d", &g)
	return g
}

type scaleMark struct {
	topics     int
	at         time.Duration
	rss        int64
	goroutines int
	threads    int
	etcdDB     float64
	cpu        time.Duration
}

// RunScale is make bench-scale: one region (tools/up: its etcd, 3
// bookies, one broker, each a process) and one broker made to hold
// o.Topics topics, each with a ledger and a durable subscription with a
// connected consumer, created over raw Pulsar-protocol connections;
// meanwhile lookups of random created topics are timed, and the broker's
// resident memory, goroutines and etcd's database size are sampled.
func RunScale(ctx context.Context, o ScaleOptions, out io.Writer) error {
	if o.Topics == 0 {
		o.Topics = 100000
	}
	if o.Conns == 0 {
		o.Conns = 64
	}
	if o.TimeBox == 0 {
		o.TimeBox = 25 * time.Minute
	}
	dir, cleanup, err := workDir(o.Dir, "scale")
	if err != nil {
		return err
	}
	defer cleanup()
	pprofDir := filepath.Join(dir, "pprof")
	if err := os.MkdirAll(pprofDir, 0o755); err != nil {
		return err
	}
	os.Setenv("MERIDIAN_PPROF_DIR", pprofDir)
	plan, err := up.NewPlan(up.Options{Regions: []string{"east"}, BrokersPerRegion: 1, BookiesPerRegion: 3, RacksPerRegion: 3,
		DataDir: filepath.Join(dir, "up"), GossipProfile: "fast"})
	if err != nil {
		return err
	}
	dep, err := up.Start(ctx, plan, o.MeridianBin, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	os.Unsetenv("MERIDIAN_PPROF_DIR")
	if err != nil {
		return err
	}
	defer dep.Stop(30 * time.Second)
	var region up.RegionEndpoint
	for _, r := range dep.Endpoints().Regions {
		region = r
	}
	var brokerAddr string
	var brokerPid int
	for _, ps := range plan.Procs {
		if ps.Role == "broker" {
			brokerAddr, brokerPid = ps.Addr, dep.Pid(ps.Name)
		}
	}
	pp, err := pprofAddr(pprofDir, brokerPid)
	if err != nil {
		return err
	}
	etcdDB := func() float64 {
		m := scrapeMetrics(region.EtcdURL + "/metrics")
		return m["etcd_mvcc_db_total_size_in_bytes"]
	}
	g := &geoDeployment{d: dep, east: region}
	if err := g.createNamespace(ctx, "public/scale", []string{region.Name}, nil); err != nil {
		return err
	}
	time.Sleep(2 * time.Second)
	base := scaleMark{rss: rssBytes(brokerPid), goroutines: goroutines(pp), threads: threads(brokerPid), etcdDB: etcdDB()}
	base.cpu, _ = pidCPU(brokerPid)
	fmt.Fprintf(out, "broker pid %d at %s: RSS %.0f MiB, %d goroutines, etcd db %.1f MiB\n", brokerPid, brokerAddr, float64(base.rss)/(1<<20), base.goroutines, base.etcdDB/(1<<20))

	conns := make([]*rawConn, o.Conns)
	for i := range conns {
		if conns[i], err = dialRaw(brokerAddr); err != nil {
			return err
		}
	}
	defer func() {
		for _, c := range conns {
			c.c.Close()
		}
	}()
	topicName := func(i int) string { return fmt.Sprintf("persistent://public/scale/t-%06d", i) }
	var created atomic.Int64
	var failed atomic.Int64
	var firstErr atomic.Pointer[error]
	next := atomic.Int64{}
	start := time.Now()
	cctx, stopCreate := context.WithTimeout(ctx, o.TimeBox)
	defer stopCreate()
	var wg sync.WaitGroup
	for ci, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for cctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= o.Topics {
					return
				}
				if err := c.createTopic(topicName(i), uint64(i)); err != nil {
					if failed.Add(1) == 1 {
						e := fmt.Errorf("topic %d on connection %d: %w", i, ci, err)
						firstErr.Store(&e)
					}
					if failed.Load() > 100 {
						stopCreate()
					}
					continue
				}
				created.Add(1)
			}
		}()
	}
	// Lookups while creating: one a 10 ms of a random created topic, on a
	// connection of their own.
	lc, err := dialRaw(brokerAddr)
	if err != nil {
		return err
	}
	defer lc.c.Close()
	var lookMu sync.Mutex
	var lookLat []time.Duration
	lookErrs := 0
	lookDone := make(chan struct{})
	go func() {
		defer close(lookDone)
		for cctx.Err() == nil {
			n := int(created.Load())
			if n > 0 {
				t0 := time.Now()
				err := lc.lookup(topicName(rand.IntN(n)))
				d := time.Since(t0)
				lookMu.Lock()
				if err != nil {
					lookErrs++
				} else {
					lookLat = append(lookLat, d)
				}
				lookMu.Unlock()
			}
			if next.Load() >= int64(o.Topics) && int(created.Load())+int(failed.Load()) >= o.Topics {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	var marks []scaleMark
	milestones := []int{o.Topics / 10, o.Topics / 4, o.Topics / 2, o.Topics * 3 / 4, o.Topics}
	mi := 0
	peakRSS := base.rss
	tick := time.NewTicker(time.Second)
	creating := make(chan struct{})
	go func() { wg.Wait(); close(creating) }()
	last := time.Now()
	for done := false; !done; {
		select {
		case <-creating:
			done = true
		case <-tick.C:
		}
		n := int(created.Load())
		peakRSS = max(peakRSS, rssBytes(brokerPid))
		if time.Since(last) > 15*time.Second {
			last = time.Now()
			fmt.Fprintf(out, "  %6d topics in %v (%.0f/s), broker RSS %.0f MiB, failed %d\n", n, time.Since(start).Round(time.Second),
				float64(n)/time.Since(start).Seconds(), float64(rssBytes(brokerPid))/(1<<20), failed.Load())
		}
		for mi < len(milestones) && (n >= milestones[mi] || done) {
			m := scaleMark{topics: n, at: time.Since(start), rss: rssBytes(brokerPid), goroutines: goroutines(pp), threads: threads(brokerPid), etcdDB: etcdDB()}
			m.cpu, _ = pidCPU(brokerPid)
			marks = append(marks, m)
			fmt.Fprintf(out, "  milestone %d topics at %v: RSS %.0f MiB, %d goroutines, %d threads, etcd db %.1f MiB\n", n, m.at.Round(time.Second),
				float64(m.rss)/(1<<20), m.goroutines, m.threads, m.etcdDB/(1<<20))
			mi++
			if done {
				break
			}
		}
	}
	elapsed := time.Since(start)
	stopCreate()
	<-lookDone
	// Idle: 30 s with every topic loaded and nothing happening; then a
	// burst of lookups at the idle broker.
	idleCPU0, _ := pidCPU(brokerPid)
	idleProf := &profilePair{Name: "the broker, idle, holding every topic", Bin: o.MeridianBin, Window: 25 * time.Second}
	if o.ProfileDir != "" {
		t0 := time.Now()
		idleProf.CPU, idleProf.Allocs, idleProf.Err = captureProfiles(ctx, pp, o.ProfileDir, "scale-idle-broker", idleProf.Window)
		time.Sleep(30*time.Second - time.Since(t0))
	} else {
		time.Sleep(30 * time.Second)
	}
	idleCPU1, _ := pidCPU(brokerPid)
	idle := scaleMark{topics: int(created.Load()), rss: rssBytes(brokerPid), goroutines: goroutines(pp), threads: threads(brokerPid), etcdDB: etcdDB()}
	var idleLook []time.Duration
	if n := int(created.Load()); n > 0 {
		for range 1000 {
			t0 := time.Now()
			if err := lc.lookup(topicName(rand.IntN(n))); err == nil {
				idleLook = append(idleLook, time.Since(t0))
			}
		}
	}
	n := int(created.Load())
	var sb strings.Builder
	host, _ := os.Hostname()
	fmt.Fprintf(&sb, "# Scale: one broker, many topics\n\nGenerated by `make bench-scale` (`%s`); do not edit by hand.\n\n", o.Command)
	fmt.Fprintf(&sb, "Run %s on %s (%d cores); load average %s at the end. Deployment: `tools/up`, one region, its etcd, 3 bookies (3 racks) and one broker, each a separate process, on this machine. "+
		"Load: %d raw Pulsar-protocol connections (broker/codec; not pulsar-client-go, whose per-producer and per-consumer goroutines and queues would dominate the load side's memory), each creating topics one after another: "+
		"PRODUCER, one SEND (the managed ledger opens its first ledger on the first append), CLOSE_PRODUCER, SUBSCRIBE (durable subscription \"s\", Exclusive; the consumer stays connected without permits). "+
		"Meanwhile a separate connection looks up a random created topic every 10 ms. Time box %v.\n\n",
		time.Now().UTC().Format("2006-01-02 15:04 MST"), host, runtime.NumCPU(), loadAvg(), o.Conns, o.TimeBox)
	sort.Slice(lookLat, func(i, j int) bool { return lookLat[i] < lookLat[j] })
	fmt.Fprintf(&sb, "| measure | value | target |\n|---|---:|---|\n")
	fmt.Fprintf(&sb, "| topics created (each with a ledger and a subscription with a consumer) | %d of %d in %v | 100,000 |\n", n, o.Topics, elapsed.Round(time.Second))
	fmt.Fprintf(&sb, "| topic-creation rate | %.0f topics/s | |\n", float64(n)/elapsed.Seconds())
	fmt.Fprintf(&sb, "| creations failed | %d | 0 |\n", failed.Load())
	if e := firstErr.Load(); e != nil {
		fmt.Fprintf(&sb, "| first failure | %s | |\n", mdEscape((*e).Error()))
	}
	fmt.Fprintf(&sb, "| broker resident memory with all topics loaded, idle | %.0f MiB (peak %.0f MiB) | ≤ 4 GiB |\n", float64(idle.rss)/(1<<20), float64(peakRSS)/(1<<20))
	if n > 0 {
		fmt.Fprintf(&sb, "| memory per idle topic (RSS growth ÷ topics) | %.1f KiB | |\n", float64(idle.rss-base.rss)/float64(n)/1024)
		fmt.Fprintf(&sb, "| broker goroutines per topic | %.1f (%d in all) | |\n", float64(idle.goroutines-base.goroutines)/float64(n), idle.goroutines)
	}
	fmt.Fprintf(&sb, "| broker CPU while idle with all topics loaded | %.0f %% of a core | |\n", (idleCPU1-idleCPU0).Seconds()/30*100)
	if len(lookLat) > 0 {
		fmt.Fprintf(&sb, "| lookup latency while creating: p50 / p99 / max (%d lookups, %d failed) | %v / %v / %v | p99 ≤ 10 ms |\n", len(lookLat), lookErrs,
			pctOf(lookLat, 0.5).Round(10*time.Microsecond), pctOf(lookLat, 0.99).Round(10*time.Microsecond), lookLat[len(lookLat)-1].Round(10*time.Microsecond))
	}
	if len(idleLook) > 0 {
		fmt.Fprintf(&sb, "| lookup latency at the idle loaded broker: p50 / p99 (%d lookups) | %v / %v | p99 ≤ 10 ms |\n", len(idleLook),
			pctOf(idleLook, 0.5).Round(10*time.Microsecond), pctOf(idleLook, 0.99).Round(10*time.Microsecond))
	}
	fmt.Fprintf(&sb, "| etcd database size (the region's etcd) | %.1f MiB (%.0f B per topic) | ≤ 2 GiB (the default quota) |\n", idle.etcdDB/(1<<20), (idle.etcdDB-base.etcdDB)/float64(max(1, n)))
	fmt.Fprintf(&sb, "\n| topics | at | broker RSS | goroutines | threads | etcd db | broker CPU so far |\n|---:|---:|---:|---:|---:|---:|---:|\n")
	fmt.Fprintf(&sb, "| 0 | | %.0f MiB | %d | %d | %.1f MiB | |\n", float64(base.rss)/(1<<20), base.goroutines, base.threads, base.etcdDB/(1<<20))
	for _, m := range marks {
		fmt.Fprintf(&sb, "| %d | %v | %.0f MiB | %d | %d | %.1f MiB | %.0f s |\n", m.topics, m.at.Round(time.Second), float64(m.rss)/(1<<20), m.goroutines, m.threads, m.etcdDB/(1<<20), (m.cpu - base.cpu).Seconds())
	}
	fmt.Fprintf(&sb, "| %d (idle, 30 s later) | | %.0f MiB | %d | %d | %.1f MiB | |\n", idle.topics, float64(idle.rss)/(1<<20), idle.goroutines, idle.threads, idle.etcdDB/(1<<20))
	heapTop := ""
	if o.ProfileDir != "" {
		hf := filepath.Join(o.ProfileDir, "scale-idle-broker.heap.pb.gz")
		if resp, err := (&http.Client{Timeout: time.Minute}).Get("http://" + pp + "/debug/pprof/heap"); err == nil {
			if f, err := os.Create(hf); err == nil {
				_, _ = io.Copy(f, resp.Body)
				f.Close()
				heapTop, _ = pprofTop(ctx, o.MeridianBin, hf, 25, "-sample_index=inuse_space")
			}
			resp.Body.Close()
		}
	}
	if o.ProfileDir != "" {
		idleProf.summarise(ctx)
		fmt.Fprintf(&sb, "\nWhere an idle broker holding the topics spends its CPU (the broker process, profiled during the 30 s idle window; file in `%s`):\n\n", o.ProfileDir)
		idleProf.markdown(&sb)
		if heapTop != "" {
			fmt.Fprintf(&sb, "Its heap, in use, with every topic loaded (`go tool pprof -top -sample_index=inuse_space`, `scale-idle-broker.heap.pb.gz`):\n\n<details><summary>heap</summary>\n\n```\n%s\n```\n\n</details>\n", heapTop)
		}
	}
	fmt.Fprint(out, "\n"+sb.String())
	if o.Out != "" {
		return os.WriteFile(o.Out, []byte(sb.String()), 0o644)
	}
	return nil
}
