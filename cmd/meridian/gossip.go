package main

import (
	"encoding/base64"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"

	"github.com/meridian-mq/meridian/bookie/ledger"
	"github.com/meridian-mq/meridian/cluster"
	"github.com/meridian-mq/meridian/internal/config"
	"github.com/meridian-mq/meridian/proto/metapb"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// gossipFlags are the flags every gossiping role (broker, bookie,
// autorecovery) takes; their keys are gossip.addr, gossip.seeds, ….
type gossipFlags struct {
	addr    string
	adv     string
	seeds   string
	key     string
	keyFile string
	profile string
}

func (g *gossipFlags) register(cmd *cobra.Command) {
	f := cmd.Flags()
	config.Group(f, "gossip", func() { g.registerFlags(f) })
}

func (g *gossipFlags) registerFlags(f *pflag.FlagSet) {
	f.StringVar(&g.addr, "gossip-addr", "", "gossip (serf) bind address host:port, UDP and TCP (serf's port is 7946); empty: no gossip")
	f.StringVar(&g.adv, "gossip-advertise-addr", "", "gossip address host:port other members reach this one at, when it differs from --gossip-addr (NAT, a container) (default: --gossip-addr; bound to 0.0.0.0, the first private IP)")
	f.StringVar(&g.seeds, "gossip-seeds", "", "gossip members to join, comma-separated host:port")
	f.StringVar(&g.key, "gossip-key", "", "base64 AES key (16, 24 or 32 bytes) encrypting gossip; empty: plaintext (visible in ps: prefer --gossip-key-file)")
	f.StringVar(&g.keyFile, "gossip-key-file", "", "file holding the base64 gossip key")
	f.StringVar(&g.profile, "gossip-profile", "meridian", "gossip timings: meridian (failure detection in ~2-4 s across regions), lan (memberlist's LAN defaults) or fast (loopback tests)")
}

// start joins the gossip cluster if --gossip-addr is set (nil otherwise).
func (g *gossipFlags) start(name string, role cluster.Role, region, rack, service, admin string, log *slog.Logger) (*cluster.Membership, error) {
	if g.addr == "" {
		return nil, nil
	}
	var c cluster.MembershipConfig
	switch g.profile {
	case "meridian", "":
		c = cluster.RegionsConfig()
	case "lan":
		c = cluster.DefaultMembershipConfig()
	case "fast":
		c = cluster.FastLocalConfig()
	default:
		return nil, fmt.Errorf("gossip profile %q: want meridian, lan or fast", g.profile)
	}
	host, port, err := net.SplitHostPort(g.addr)
	if err != nil {
		return nil, fmt.Errorf("--gossip-addr: %w", err)
	}
	c.BindAddr = host
	if c.BindPort, err = strconv.Atoi(port); err != nil {
		return nil, fmt.Errorf("--gossip-addr port: %w", err)
	}
	if g.adv != "" {
		h, p, err := net.SplitHostPort(g.adv)
		if err != nil {
			return nil, fmt.Errorf("--gossip-advertise-addr: %w", err)
		}
		c.AdvertiseAddr = h
		if c.AdvertisePort, err = strconv.Atoi(p); err != nil {
			return nil, fmt.Errorf("--gossip-advertise-addr port: %w", err)
		}
	}
	c.NodeName, c.Role, c.Region, c.Rack, c.ServiceAddr, c.AdminAddr = name, role, region, rack, service, admin
	c.Seeds = splitList(g.seeds)
	if g.keyFile != "" {
		b, err := os.ReadFile(g.keyFile)
		if err != nil {
			return nil, fmt.Errorf("--gossip-key-file: %w", err)
		}
		g.key = strings.TrimSpace(string(b))
	}
	if g.key != "" {
		k, err := base64.StdEncoding.DecodeString(g.key)
		if err != nil {
			return nil, fmt.Errorf("--gossip-key: %w", err)
		}
		c.SecretKey = k
	}
	c.Logger = log.With("component", "gossip")
	return cluster.JoinMembership(c)
}

// gossipFilteredBookies keeps bookies that gossip declared failed out of
// new ensembles before their etcd registration expires.
type gossipFilteredBookies struct {
	inner interface {
		Writable() []*metapb.BookieRegistration
		Lookup(id string) (*metapb.BookieRegistration, bool)
	}
	m *cluster.Membership
}

func (g gossipFilteredBookies) Writable() []*metapb.BookieRegistration {
	return g.m.Snapshot().ExcludeFailedBookies(g.inner.Writable())
}

func (g gossipFilteredBookies) Lookup(id string) (*metapb.BookieRegistration, bool) {
	return g.inner.Lookup(id)
}

// ReadOnly passes the inner source's read-only bookies on (for the ledger
// client's "not enough bookies" errors: ledger.ReadOnlyLister).
func (g gossipFilteredBookies) ReadOnly() []*metapb.BookieRegistration {
	if l, ok := g.inner.(ledger.ReadOnlyLister); ok {
		return l.ReadOnly()
	}
	return nil
}

// healthJSON is the gossip health view as the admin API shows it.
func healthJSON(v cluster.HealthView) any {
	type member struct {
		Name   string `json:"name"`
		Region string `json:"region"`
		Rack   string `json:"rack,omitempty"`
		Role   string `json:"role"`
		Addr   string `json:"addr,omitempty"`
		State  string `json:"state"`
		Since  string `json:"since"`
	}
	out := []member{}
	for _, m := range v.Members() {
		out = append(out, member{Name: m.Name, Region: m.Region, Rack: m.Rack, Role: string(m.Role), Addr: m.Addr,
			State: m.State.String(), Since: m.Since.UTC().Format("2006-01-02T15:04:05.000Z")})
	}
	return map[string]any{"members": out}
}
