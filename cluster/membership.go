package cluster

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/hashicorp/serf/serf"
	"github.com/meridian-mq/meridian/cluster/health"
	"github.com/meridian-mq/meridian/internal/ratelog"
)

// Membership is this process's place in the gossip cluster that spans every
// region (hashicorp/serf over memberlist), and its HealthView of the
// others. It is the shell around BuildHealthView: it owns serf, the
// background join, and one loop goroutine that rebuilds the view whenever
// serf reports a member event and every ProbeInterval/2 (to catch
// memberlist's suspicions, which raise no event). Safe for concurrent use.
//
// Lifecycle: JoinMembership; SetTags as the process's state changes (write
// probes); Leave on orderly shutdown so others see "left", not "failed";
// Shutdown last (without Leave it looks like a crash to the others).
type Membership struct {
	cfg  MembershipConfig
	log  *slog.Logger
	serf *serf.Serf
	// keyring is memberlist's keyring (nil without encryption): serf's
	// key queries change it; tests read it directly.
	keyring *memberlist.Keyring
	keyMu   sync.Mutex     // serializes keyring operations (keyring.go)
	keyWait time.Duration  // how long a keyring operation waits for every member: keyOpWait
	susp    *suspectReader // nil: suspicion unavailable, see suspect.go
	kick    chan struct{}  // capacity 1: rebuild the view soon
	stop    chan struct{}  // closed by Shutdown
	joined  chan struct{}  // closed once a seed answered (or there were none)
	wg      sync.WaitGroup // the event pump and the loop
	down    atomic.Bool    // Shutdown called

	tagMu sync.Mutex        // serializes SetTags
	tags  map[string]string // the tags serf publishes; guarded by tagMu

	mu     sync.Mutex
	cur    HealthView                   // guarded by mu
	subs   map[chan HealthView]struct{} // guarded by mu
	closed bool                         // guarded by mu: subscriptions are closed

	shutdownOnce sync.Once
	shutdownErr  error
}

// eventBuffer is the capacity of serf's event channel. serf sends member
// events while holding its member lock and memberlist's node lock, so the
// channel must never be full for long: the pump drains it without taking
// any lock, and the buffer absorbs a burst (a region's worth of members
// failing at once) while the pump is descheduled.
const eventBuffer = 1024

// JoinMembership validates cfg, starts serf on cfg's bind address and
// returns at once; joining cfg.Seeds continues in the background (Joined
// tells when a seed answered). The returned view already holds this member.
func JoinMembership(cfg MembershipConfig) (*Membership, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.Tags = maps.Clone(cfg.Tags)
	cfg.Seeds = slices.Clone(cfg.Seeds)
	cfg.SecretKey = slices.Clone(cfg.SecretKey)
	cfg.SecondaryKeys = slices.Clone(cfg.SecondaryKeys)
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	logger = logger.With("member", cfg.NodeName)
	bridge := log.New(newGossipLog(logger), "", 0)

	ml := memberlist.DefaultLANConfig()
	ml.BindAddr, ml.BindPort = cfg.BindAddr, cfg.BindPort
	ml.AdvertiseAddr, ml.AdvertisePort = cfg.AdvertiseAddr, cfg.AdvertisePort
	if ml.AdvertisePort == 0 {
		ml.AdvertisePort = cfg.BindPort // memberlist replaces both when BindPort is 0
	}
	ml.ProbeInterval, ml.ProbeTimeout = cfg.ProbeInterval, cfg.ProbeTimeout
	ml.IndirectChecks = cfg.IndirectChecks
	ml.SuspicionMult, ml.SuspicionMaxTimeoutMult = cfg.SuspicionMult, cfg.SuspicionMaxTimeoutMult
	ml.AwarenessMaxMultiplier = cfg.AwarenessMaxMultiplier
	ml.GossipInterval, ml.GossipNodes = cfg.GossipInterval, cfg.GossipNodes
	ml.RetransmitMult = cfg.RetransmitMult
	ml.GossipToTheDeadTime = cfg.GossipToTheDeadTime
	ml.DeadNodeReclaimTime = cfg.DeadNodeReclaimTime
	ml.PushPullInterval = cfg.PushPullInterval
	ml.TCPTimeout = cfg.TCPTimeout
	// Gossip packets are small (a member's tags, a probe result) and sent
	// all the time (brokers publish their write probe every second);
	// compressing each one (LZW, a fresh table per packet) and the garbage
	// it made were much of an idle bookie's CPU, and without it idle
	// bookies measured ~15 % less. Receivers decompress whatever arrives,
	// so members that still compress interoperate.
	ml.EnableCompression = false
	ml.Logger, ml.LogOutput = bridge, nil
	if len(cfg.SecretKey) > 0 {
		keys := append([][]byte{cfg.SecretKey}, cfg.SecondaryKeys...)
		kr, err := memberlist.NewKeyring(keys, cfg.SecretKey)
		if err != nil {
			return nil, fmt.Errorf("cluster: gossip keyring: %w", err)
		}
		ml.Keyring = kr
		ml.GossipVerifyIncoming, ml.GossipVerifyOutgoing = true, true
	}

	events := make(chan serf.Event, eventBuffer)
	sc := serf.DefaultConfig()
	sc.NodeName = cfg.NodeName
	sc.Tags = cfg.tags()
	sc.EventCh = events
	sc.MemberlistConfig = ml
	sc.Logger, sc.LogOutput = bridge, nil
	sc.ValidateNodeNames = true
	sc.ReconnectInterval = cfg.ReconnectInterval
	sc.ReconnectTimeout = cfg.ReconnectTimeout
	sc.TombstoneTimeout = cfg.TombstoneTimeout
	sc.ReapInterval = cfg.ReapInterval
	sc.BroadcastTimeout = cfg.BroadcastTimeout
	sc.LeavePropagateDelay = cfg.LeavePropagateDelay
	if cfg.tuneSerf != nil {
		cfg.tuneSerf(sc)
	}
	s, err := serf.Create(sc)
	if err != nil {
		return nil, fmt.Errorf("cluster: start gossip on %s:%d: %w", cfg.BindAddr, cfg.BindPort, err)
	}

	m := &Membership{
		cfg:     cfg,
		log:     logger,
		serf:    s,
		keyring: ml.Keyring,
		keyWait: keyOpWait,
		kick:    make(chan struct{}, 1),
		stop:    make(chan struct{}),
		joined:  make(chan struct{}),
		tags:    maps.Clone(s.LocalMember().Tags),
		subs:    map[chan HealthView]struct{}{},
	}
	if m.susp, err = newSuspectReader(s.Memberlist()); err != nil {
		logger.Warn("gossip: memberlist suspicion unavailable; members go from alive straight to failed", "err", err)
	}
	m.refresh()
	m.wg.Add(2)
	go m.pump(events)
	go m.loop()
	if seeds := m.otherSeeds(); len(seeds) > 0 {
		go m.joinLoop(seeds)
	} else {
		close(m.joined)
	}
	logger.Info("gossip: started", "addr", m.GossipAddr(), "region", cfg.Region, "role", cfg.Role,
		"encrypted", s.EncryptionEnabled(), "seeds", len(cfg.Seeds))
	return m, nil
}

// LocalName returns this member's node name.
func (m *Membership) LocalName() string { return m.cfg.NodeName }

// GossipAddr returns the host:port this member gossips on (the advertised
// address; with BindPort 0, the port the kernel chose). Give it to other
// members as a seed.
func (m *Membership) GossipAddr() string {
	lm := m.serf.LocalMember()
	return net.JoinHostPort(lm.Addr.String(), strconv.Itoa(int(lm.Port)))
}

// Joined is closed once a join to a seed succeeded, or at once when there
// was no other seed. It never closes if no seed ever answers.
func (m *Membership) Joined() <-chan struct{} { return m.joined }

// Snapshot returns the current view, evaluated now.
func (m *Membership) Snapshot() HealthView {
	m.mu.Lock()
	v := m.cur
	m.mu.Unlock()
	return v.At(time.Now())
}

// Members returns every known member, sorted by name.
func (m *Membership) Members() []Member { return m.Snapshot().Members() }

// Subscribe returns a channel that receives the current view at once and
// then each new one: a view is published when a member joins, changes
// state or tags, or is reaped. Delivery is latest-value: a slow reader
// misses intermediate views, never the newest, and never slows the
// membership down. A published view's AsOf is when it was built; use
// v.At(now) to evaluate probe windows later. cancel stops delivery and
// closes the channel; Shutdown closes every channel. Calling cancel twice
// is harmless.
func (m *Membership) Subscribe() (<-chan HealthView, func()) {
	ch := make(chan HealthView, 1)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		close(ch)
		return ch, func() {}
	}
	ch <- m.cur
	m.subs[ch] = struct{}{}
	return ch, func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		if _, ok := m.subs[ch]; ok {
			delete(m.subs, ch)
			close(ch)
		}
	}
}

// SetTags merges tags into the tags this member publishes (a key with value
// "" is removed) and broadcasts them; it returns once the update is sent
// out, or with an error after BroadcastTimeout (the update then still
// spreads, by gossip and push/pull). Region and role cannot change
// (ErrFixedTag). E.g. SetTags(ProbeTags(ok, time.Now())) after a write
// probe.
func (m *Membership) SetTags(tags map[string]string) error {
	if m.down.Load() {
		return ErrMembershipClosed
	}
	m.tagMu.Lock()
	defer m.tagMu.Unlock()
	next := maps.Clone(m.tags)
	for k, v := range tags {
		if k == TagRegion || k == TagRole {
			if v != next[k] {
				return fmt.Errorf("%w: %s=%q", ErrFixedTag, k, v)
			}
			continue
		}
		if v == "" {
			delete(next, k)
		} else {
			next[k] = v
		}
	}
	err := m.serf.SetTags(next)
	// serf applies the tags locally before waiting for the broadcast, so
	// after a timeout they are already ours; after a size error they are
	// not. Its local member says which.
	m.tags = maps.Clone(m.serf.LocalMember().Tags)
	m.poke()
	if err != nil {
		return fmt.Errorf("cluster: set gossip tags: %w", err)
	}
	return nil
}

// Leave announces a graceful leave and waits for it to spread (up to about
// 2×BroadcastTimeout + LeavePropagateDelay), so other members see this one
// "left" rather than "failed". If ctx ends first Leave returns ctx's error
// and the leave goes on in the background. Call Shutdown afterwards.
func (m *Membership) Leave(ctx context.Context) error {
	done := make(chan error, 1)
	go func() { done <- m.serf.Leave() }()
	select {
	case err := <-done:
		m.poke()
		if err != nil {
			return fmt.Errorf("cluster: leave gossip: %w", err)
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Shutdown stops gossip at once and closes every subscription. Without a
// Leave first, the others detect it as a failure (FailureDetectionBound).
// Snapshot keeps returning the last view. It does not wait for a join
// attempt in flight, which ends within TCPTimeout per seed. Idempotent.
func (m *Membership) Shutdown() error {
	m.shutdownOnce.Do(func() {
		m.down.Store(true)
		m.shutdownErr = m.serf.Shutdown()
		close(m.stop)
		m.wg.Wait()
		m.mu.Lock()
		m.closed = true
		for ch := range m.subs {
			close(ch)
		}
		m.subs = nil
		m.mu.Unlock()
		m.log.Info("gossip: shut down")
	})
	return m.shutdownErr
}

// otherSeeds returns cfg.Seeds without this member's own addresses.
func (m *Membership) otherSeeds() []string {
	lm := m.serf.LocalMember()
	port := strconv.Itoa(int(lm.Port))
	self := map[string]bool{
		net.JoinHostPort(lm.Addr.String(), port):                       true,
		net.JoinHostPort(m.cfg.BindAddr, port):                         true,
		net.JoinHostPort(m.cfg.BindAddr, strconv.Itoa(m.cfg.BindPort)): true,
	}
	var out []string
	for _, s := range m.cfg.Seeds {
		if !self[s] {
			out = append(out, s)
		}
	}
	return out
}

// joinLoop joins seeds with backoff until one answers or the membership
// stops.
func (m *Membership) joinLoop(seeds []string) {
	delay := m.cfg.JoinRetryIntervalMin
	for attempt := 1; ; attempt++ {
		n, err := m.serf.Join(seeds, true)
		if n > 0 {
			m.log.Info("gossip: joined", "seeds-answered", n, "seeds", len(seeds), "attempts", attempt)
			close(m.joined)
			m.poke()
			return
		}
		if m.serf.State() != serf.SerfAlive {
			return
		}
		lvl := slog.LevelDebug
		if attempt == 1 || delay == m.cfg.JoinRetryIntervalMax && attempt%10 == 0 {
			lvl = slog.LevelWarn
		}
		m.log.Log(context.Background(), lvl, "gossip: no seed answered; retrying", "attempt", attempt, "retry-in", delay, "err", err)
		select {
		case <-m.stop:
			return
		case <-time.After(delay):
		}
		delay = min(2*delay, m.cfg.JoinRetryIntervalMax)
	}
}

// poke asks the loop to rebuild the view; it never blocks.
func (m *Membership) poke() {
	select {
	case m.kick <- struct{}{}:
	default:
	}
}

// pump drains serf's events so serf never blocks on them (it sends while
// holding its locks), and pokes the loop. It takes no lock.
func (m *Membership) pump(events <-chan serf.Event) {
	defer m.wg.Done()
	for {
		select {
		case e := <-events:
			if me, ok := e.(serf.MemberEvent); ok {
				for _, mem := range me.Members {
					m.log.Debug("gossip: serf event", "event", me.Type.String(), "node", mem.Name)
				}
			}
			m.poke()
		case <-m.stop:
			return
		}
	}
}

// loop rebuilds the view on every poke and every ProbeInterval/2 — often
// enough to see every suspicion, which lasts at least
// SuspicionMult × ProbeInterval ≥ 2 × ProbeInterval.
func (m *Membership) loop() {
	defer m.wg.Done()
	tick := time.NewTicker(m.cfg.ProbeInterval / 2)
	defer tick.Stop()
	serfDown := m.serf.ShutdownCh()
	for {
		select {
		case <-m.kick:
		case <-tick.C:
		case <-serfDown:
			serfDown = nil
			if !m.down.Load() {
				// serf shuts itself down when it loses a node-name conflict.
				m.log.Error("gossip: serf shut down on its own (another process uses this node name?)")
			}
		case <-m.stop:
			return
		}
		m.refresh()
	}
}

// refresh rebuilds the view from serf's members and memberlist's
// suspicions, and publishes it if anything changed. Called by the loop
// only (and once by JoinMembership before the loop starts).
func (m *Membership) refresh() {
	var suspects map[string]bool
	if m.susp != nil {
		suspects = m.susp.suspects()
	}
	members := m.serf.Members()
	recs := make([]MemberRecord, 0, len(members))
	for _, sm := range members {
		var st MemberState
		switch sm.Status {
		case serf.StatusAlive:
			st = MemberAlive
			if suspects[sm.Name] {
				st = MemberSuspect
			}
		case serf.StatusLeaving, serf.StatusLeft:
			st = MemberLeft
		case serf.StatusFailed:
			st = MemberFailed
		default:
			continue
		}
		recs = append(recs, MemberRecord{
			Name:       sm.Name,
			GossipAddr: net.JoinHostPort(sm.Addr.String(), strconv.Itoa(int(sm.Port))),
			Tags:       sm.Tags,
			State:      st,
		})
	}
	now := time.Now()
	m.mu.Lock()
	prev := m.cur
	next := BuildHealthView(prev, recs, now, m.cfg.Health)
	if m.closed || health.SameMembers(prev, next) {
		m.mu.Unlock()
		return
	}
	m.cur = next
	for ch := range m.subs {
		select { // drop the unread older view; we are the only sender
		case <-ch:
		default:
		}
		ch <- next
	}
	m.mu.Unlock()
	m.logChanges(prev, next)
}

// logChanges logs each member that appeared, changed state or was reaped.
func (m *Membership) logChanges(prev, next HealthView) {
	for _, n := range next.Members() {
		p, ok := prev.Member(n.Name)
		if ok && p.State == n.State {
			continue
		}
		from := "unknown"
		if ok {
			from = p.State.String()
		}
		m.log.Info("gossip: member "+n.State.String(), "node", n.Name, "region", n.Region, "role", n.Role, "from", from)
	}
	for _, p := range prev.Members() {
		if _, ok := next.Member(p.Name); !ok {
			m.log.Info("gossip: member reaped", "node", p.Name, "region", p.Region, "role", p.Role, "was", p.State.String())
		}
	}
}

// gossipLog is the io.Writer behind the *log.Logger serf and memberlist
// write to. It turns their "[LEVEL] component: message" lines into slog
// records — DEBUG and INFO at Debug (their INFO is chatty: every probe
// failure, reconnect attempt), WARN at Warn, ERR at Error — and passes each
// distinct message at most once per gossipLogEvery, counting the rest
// (a peer with the wrong key makes memberlist log every packet it drops).
type gossipLog struct {
	l   *slog.Logger
	lim ratelog.Limiter
}

const gossipLogEvery = 10 * time.Second

func newGossipLog(l *slog.Logger) *gossipLog {
	return &gossipLog{l: l, lim: ratelog.Limiter{Every: gossipLogEvery}}
}

func (g *gossipLog) Write(p []byte) (int, error) {
	for _, line := range strings.Split(strings.TrimRight(string(p), "\n"), "\n") {
		g.line(line, time.Now())
	}
	return len(p), nil
}

func (g *gossipLog) line(s string, now time.Time) {
	level := slog.LevelDebug
	switch {
	case strings.HasPrefix(s, "[ERR]"), strings.HasPrefix(s, "[ERROR]"):
		level = slog.LevelError
	case strings.HasPrefix(s, "[WARN]"):
		level = slog.LevelWarn
	}
	if !g.l.Enabled(context.Background(), level) {
		return
	}
	if i := strings.Index(s, "] "); strings.HasPrefix(s, "[") && i > 0 {
		s = s[i+2:]
	}
	component := "gossip"
	if i := strings.Index(s, ": "); i > 0 && !strings.Contains(s[:i], " ") {
		component, s = s[:i], s[i+2:]
	}
	// Messages differ by the peer they name after a colon; the text before
	// it is what repeats.
	key := s
	if i := strings.Index(key, ":"); i > 0 {
		key = key[:i]
	}
	key = component + "|" + key[:min(len(key), 80)]
	pass, suppressed := g.lim.Allow(key, now)
	if !pass {
		return
	}
	attrs := []any{"component", component}
	if suppressed > 0 {
		attrs = append(attrs, "suppressed", suppressed)
	}
	g.l.Log(context.Background(), level, s, attrs...)
}
