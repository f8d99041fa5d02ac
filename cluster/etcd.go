package cluster

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
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
}

// Etcd is a running embedded etcd member.
type Etcd struct {
	e   *embed.Etcd
	cfg EtcdConfig
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
	if c.InitialCluster == "" {
		c.InitialCluster = c.Name + "=" + c.PeerURL
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
	ec := embed.NewConfig()
	ec.Name = c.Name
	ec.Dir = c.DataDir
	ec.ListenClientUrls = []url.URL{*curl}
	ec.AdvertiseClientUrls = []url.URL{*curl}
	ec.ListenPeerUrls = []url.URL{*purl}
	ec.AdvertisePeerUrls = []url.URL{*purl}
	ec.InitialCluster = c.InitialCluster
	ec.ClusterState = c.ClusterState
	ec.InitialClusterToken = "meridian"
	ec.QuotaBackendBytes = c.QuotaBackendBytes
	// Compact history older than an hour so the backend does not grow with
	// every revision of hot keys (cursors, ledger lists).
	ec.AutoCompactionMode = "periodic"
	ec.AutoCompactionRetention = "1h"
	ec.ZapLoggerBuilder = embed.NewZapLoggerBuilder(silentZap())
	e, err := embed.StartEtcd(ec)
	if err != nil {
		return nil, fmt.Errorf("cluster: start etcd: %w", err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("cluster: etcd failed: %w", err)
	case <-time.After(c.StartTimeout):
		e.Server.Stop()
		e.Close()
		return nil, fmt.Errorf("cluster: etcd %s not ready after %s (with several members it needs a quorum)", c.Name, c.StartTimeout)
	}
	return &Etcd{e: e, cfg: c}, nil
}

// ClientURL returns the URL clients use.
func (e *Etcd) ClientURL() string { return strings.TrimRight(e.cfg.ClientURL, "/") }

// Err reports a fatal error of the running member.
func (e *Etcd) Err() <-chan error { return e.e.Err() }

// Close stops the member.
func (e *Etcd) Close() { e.e.Close() }
