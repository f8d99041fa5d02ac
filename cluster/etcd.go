package cluster

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"github.com/meridian-mq/meridian/internal/netaddr"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meridian-mq/meridian/internal/tlsutil"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	"go.etcd.io/etcd/client/pkg/v3/types"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// EtcdConfig describes one embedded etcd member.
type EtcdConfig struct {
	// Name of the member, unique within its etcd cluster. Default "default".
	Name string `yaml:"name"`
	// DataDir holds the member's WAL and snapshots. Required.
	DataDir string `yaml:"data_dir"`
	// ClientURL clients connect to, e.g. "http://127.0.0.1:2379".
	ClientURL string `yaml:"client_url"`
	// PeerURL other members connect to, e.g. "http://127.0.0.1:2380".
	PeerURL string `yaml:"peer_url"`
	// AdvertiseClientURL and AdvertisePeerURL are the URLs this member
	// tells clients and peers (etcd's advertise-client-urls and
	// initial-advertise-peer-urls) when they differ from the listen URLs
	// (NAT, a container listening on 0.0.0.0). Default: the listen URL, a
	// wildcard host replaced by the host name (internal/netaddr).
	AdvertiseClientURL string `yaml:"advertise_client_url"`
	AdvertisePeerURL   string `yaml:"advertise_peer_url"`
	// InitialCluster lists every member as name=peerURL, comma-separated.
	// Empty means a single-member cluster of this member alone.
	InitialCluster string `yaml:"initial_cluster"`
	// ClusterState is "new" (bootstrap) or "existing" (join). Default "new".
	ClusterState string `yaml:"cluster_state"`
	// QuotaBackendBytes is etcd's backend size limit. Default 0 = etcd's own
	// default (2 GiB); etcd recommends at most 8 GiB.
	QuotaBackendBytes int64 `yaml:"quota_backend_bytes"`
	// StartTimeout bounds how long Start waits for the member to be ready
	// (with several members it needs a quorum). Default 60s.
	StartTimeout time.Duration `yaml:"start_timeout"`
	// PreferLeader makes this member take the raft leadership whenever it
	// is healthy and another member leads (checked every
	// LeaderCheckInterval). Set on the global store's witness: every
	// leader change extends every lease by its full TTL plus the election
	// timeout (etcd's lessor.Promote), so a data region whose member led
	// the global store held its failover lease ~6 s longer when it died
	// than when another member led — the failover waited for it. With the
	// witness leading, losing a region never changes the leader.
	PreferLeader bool `yaml:"prefer_leader"`
	// LeaderCheckInterval: how often a PreferLeader member checks who
	// leads. Default 2s.
	LeaderCheckInterval time.Duration `yaml:"leader_check_interval"`
	// TLS, if set, serves clients and peers over mutual TLS (the URLs
	// must then be https://): a client or peer must present a certificate
	// from the CA. With etcd authentication enabled (`meridian up --tls`
	// enables it), a client certificate's common name is its etcd user.
	// etcd re-reads the certificate and key at each handshake.
	TLS tlsutil.Files `yaml:"tls,omitempty"`
	// AllowedClientCNs, with TLS, admits only client certificates with
	// one of these common names (etcd's --client-cert-allowed-cn): the
	// standalone's embedded etcd serves the standalone's own certificate
	// only, not any other certificate of its CA (a user's, for the Pulsar
	// listener's "tls" authentication). Empty: any certificate of the CA.
	AllowedClientCNs []string `yaml:"-"`
	// Logger receives the member's leader changes and its leadership
	// moves; etcd's own warnings go to stderr (serverZap). Default
	// slog.Default().
	Logger *slog.Logger `yaml:"-"`
}

// Etcd is a running embedded etcd member.
type Etcd struct {
	e     *embed.Etcd
	cfg   EtcdConfig
	log   *slog.Logger
	quiet *atomic.Bool // set by Close: etcd's shutdown errors are not news
	stop  chan struct{}
	done  chan struct{}
}

// StartEtcd starts an embedded etcd member and waits until it serves.
func StartEtcd(c EtcdConfig) (*Etcd, error) {
	if c.DataDir == "" {
		return nil, errors.New("cluster: etcd data dir is required")
	}
	if c.Name == "" {
		c.Name = "default"
	}
	if c.ClientURL == "" {
		c.ClientURL = "http://127.0.0.1:2379"
	}
	if c.PeerURL == "" {
		c.PeerURL = "http://127.0.0.1:2380"
	}
	if c.AdvertiseClientURL == "" {
		c.AdvertiseClientURL = advertisedURL(c.ClientURL)
	}
	if c.AdvertisePeerURL == "" {
		c.AdvertisePeerURL = advertisedURL(c.PeerURL)
	}
	if c.InitialCluster == "" {
		c.InitialCluster = c.Name + "=" + c.AdvertisePeerURL
	}
	if c.ClusterState == "" {
		c.ClusterState = embed.ClusterStateFlagNew
	}
	if c.StartTimeout == 0 {
		c.StartTimeout = 60 * time.Second
	}
	curl, err := url.Parse(c.ClientURL)
	if err != nil {
		return nil, fmt.Errorf("cluster: etcd client url %q: %w", c.ClientURL, err)
	}
	purl, err := url.Parse(c.PeerURL)
	if err != nil {
		return nil, fmt.Errorf("cluster: etcd peer url %q: %w", c.PeerURL, err)
	}
	acurl, err := url.Parse(c.AdvertiseClientURL)
	if err != nil {
		return nil, fmt.Errorf("cluster: etcd advertised client url %q: %w", c.AdvertiseClientURL, err)
	}
	apurl, err := url.Parse(c.AdvertisePeerURL)
	if err != nil {
		return nil, fmt.Errorf("cluster: etcd advertised peer url %q: %w", c.AdvertisePeerURL, err)
	}
	ec := embed.NewConfig()
	ec.Name = c.Name
	ec.Dir = c.DataDir
	ec.ListenClientUrls = []url.URL{*curl}
	ec.AdvertiseClientUrls = []url.URL{*acurl}
	ec.ListenPeerUrls = []url.URL{*purl}
	ec.AdvertisePeerUrls = []url.URL{*apurl}
	ec.InitialCluster = c.InitialCluster
	ec.ClusterState = c.ClusterState
	ec.InitialClusterToken = "meridian"
	ec.QuotaBackendBytes = c.QuotaBackendBytes
	// Compact history older than an hour so the backend does not grow with
	// every revision of hot keys (cursors, ledger lists).
	ec.AutoCompactionMode = "periodic"
	ec.AutoCompactionRetention = "1h"
	// Clients ping every 2 s (StoreConfig.KeepAliveTime) to notice a
	// silently dropped connection; etcd's default refuses pings under 5 s.
	ec.GRPCKeepAliveMinTime = time.Second
	if c.TLS.Enabled() {
		if err := c.TLS.Validate(); err != nil {
			return nil, err
		}
		ti := transport.TLSInfo{CertFile: c.TLS.CertFile, KeyFile: c.TLS.KeyFile, TrustedCAFile: c.TLS.CAFile, ClientCertAuth: true}
		ec.ClientTLSInfo, ec.PeerTLSInfo = ti, ti
		ec.PeerTLSInfo.ClientCertAuth = true
		ec.ClientTLSInfo.AllowedCNs = c.AllowedClientCNs
	}
	quiet := new(atomic.Bool)
	ec.ZapLoggerBuilder = embed.NewZapLoggerBuilder(serverZap(quiet))
	e, err := embed.StartEtcd(ec)
	if err != nil {
		return nil, fmt.Errorf("cluster: start etcd: %w", err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		quiet.Store(true)
		e.Close()
		return nil, fmt.Errorf("cluster: etcd failed: %w", err)
	case <-time.After(c.StartTimeout):
		quiet.Store(true)
		e.Server.Stop()
		e.Close()
		return nil, fmt.Errorf("cluster: etcd %s not ready after %s (with several members it needs a quorum)", c.Name, c.StartTimeout)
	}
	m := &Etcd{e: e, cfg: c, log: cmp.Or(c.Logger, slog.Default()), quiet: quiet, stop: make(chan struct{}), done: make(chan struct{})}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); m.watchLeader() }()
	if c.PreferLeader {
		if c.LeaderCheckInterval <= 0 {
			m.cfg.LeaderCheckInterval = 2 * time.Second
		}
		wg.Add(1)
		go func() { defer wg.Done(); m.takeLeadership() }()
	}
	go func() { wg.Wait(); close(m.done) }()
	return m, nil
}

// watchLeader logs each change of the member's view of the leader: a
// write proposed across a change can time out with its outcome unknown,
// and a log without the change leaves such a timeout unexplained. The
// first leader seen after the start is logged at info, the later changes
// at warn (on a healthy cluster they are the witness taking the
// leadership, and failures).
func (m *Etcd) watchLeader() {
	srv := m.e.Server
	prev := types.ID(0)
	for first := true; ; first = false {
		ch := srv.LeaderChangedNotify()
		lead := srv.Leader()
		if lead != prev {
			lvl := slog.LevelWarn
			if prev == 0 && first {
				lvl = slog.LevelInfo
			}
			m.log.Log(context.Background(), lvl, "etcd: leader changed", "member", m.cfg.Name,
				"leader", m.memberName(lead), "previous", m.memberName(prev), "term", srv.Term())
			prev = lead
		}
		select {
		case <-m.stop:
			return
		case <-ch:
		}
	}
}

// memberName names a member by its name, or its id when unknown ("none"
// for no leader).
func (m *Etcd) memberName(id types.ID) string {
	if id == 0 {
		return "none"
	}
	if mb := m.e.Server.Cluster().Member(id); mb != nil && mb.Name != "" {
		return mb.Name
	}
	return id.String()
}

// takeLeadership asks the current leader, every LeaderCheckInterval, to
// hand the leadership to this member when another member leads.
// (MoveLeader must be sent to the leader; it transfers only to a member
// whose log is caught up, so a lagging member waits.)
func (m *Etcd) takeLeadership() {
	t := time.NewTicker(m.cfg.LeaderCheckInterval)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
		}
		if err := m.moveLeaderHere(); err != nil {
			m.log.Debug("etcd: taking the leadership", "member", m.cfg.Name, "err", err)
		}
	}
}

func (m *Etcd) moveLeaderHere() error {
	srv := m.e.Server
	self, lead := srv.MemberID(), srv.Leader()
	if lead == 0 || lead == self {
		return nil
	}
	lm := srv.Cluster().Member(lead)
	if lm == nil || len(lm.ClientURLs) == 0 {
		return fmt.Errorf("leader %s has no client URL", lead)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cc := clientv3.Config{Endpoints: lm.ClientURLs, DialTimeout: 2 * time.Second, Context: ctx, Logger: zapAt(zap.FatalLevel)}
	if m.cfg.TLS.Enabled() {
		src, err := tlsutil.NewSource(m.cfg.TLS)
		if err != nil {
			return err
		}
		cc.TLS = src.ClientConfig("")
	}
	cli, err := clientv3.New(cc)
	if err != nil {
		return err
	}
	defer cli.Close()
	if _, err := cli.MoveLeader(ctx, uint64(self)); err != nil {
		return fmt.Errorf("move leader from %s: %w", lead, err)
	}
	m.log.Info("etcd: took the leadership (prefer-leader)", "member", m.cfg.Name, "previous", lead.String())
	return nil
}

// IsLeader reports whether this member leads its cluster.
func (m *Etcd) IsLeader() bool { return m.e.Server.Leader() == m.e.Server.MemberID() }

// ClientCertRequired reports whether the member serves its clients only
// over mutual TLS (a client certificate of the CA, and of
// AllowedClientCNs when set): TLS is on. Without it any caller that
// reaches the client URL reads and writes every key (etcd users aside).
func (m *Etcd) ClientCertRequired() bool { return m.cfg.TLS.Enabled() }

// AuthEnabled reports whether etcd's authentication (users and roles,
// `etcdctl auth enable`; `meridian up --tls` turns it on) is on now: then
// a certificate's common name, or a password, must be a user with a role
// granting the key.
func (m *Etcd) AuthEnabled() bool { return m.e.Server.AuthStore().IsAuthEnabled() }

// ClientURL returns the URL clients use.
func (e *Etcd) ClientURL() string { return strings.TrimRight(e.cfg.AdvertiseClientURL, "/") }

// advertisedURL is u with a wildcard host replaced by the host name.
func advertisedURL(u string) string {
	pu, err := url.Parse(u)
	if err != nil || pu.Host == "" {
		return u
	}
	pu.Host = netaddr.Advertised(pu.Host, nil)
	return pu.String()
}

// Err reports a fatal error of the running member.
func (e *Etcd) Err() <-chan error { return e.e.Err() }

// Close stops the member.
func (e *Etcd) Close() {
	select {
	case <-e.stop:
	default:
		close(e.stop)
	}
	<-e.done
	e.quiet.Store(true)
	e.e.Close()
}
