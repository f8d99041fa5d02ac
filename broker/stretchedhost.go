package broker

import (
	"fmt"

	"github.com/meridian-mq/meridian/broker/meta"
	"github.com/meridian-mq/meridian/broker/mledger"
	"github.com/meridian-mq/meridian/broker/stretched"
)

// The broker's side of the stretched placement (broker/stretched): its
// wiring, and what it asks of the broker.

// startStretched starts the stretched placement of a multi-region broker
// (nil when the broker is not multi-region).
func (b *Broker) startStretched() (*stretched.Placement, error) {
	cfg := stretched.Config{
		Cluster: b.cfg.Cluster, Store: b.cfg.Store, GlobalStore: b.cfg.GlobalStore, Meta: b.meta,
		Bookies: b.cfg.Bookies, HealthView: b.cfg.HealthView, OwnershipTTL: b.cfg.OwnershipTTL,
		ManagedLedger: b.cfg.ManagedLedger, Registerer: b.metrics.reg,
		Alert:  func(kind string) { b.metrics.replAlerts.WithLabelValues(kind).Inc() },
		Logger: b.cfg.Logger,
	}
	if b.guard != nil {
		cfg.DialOptions = b.guard.GRPCDialOptions()
	}
	p, err := stretched.Start(cfg, stretchedHost{b})
	if p != nil {
		b.stretchedLive.Store(p)
	}
	return p, err
}

// stretchedHost is the broker as the stretched placement sees it.
type stretchedHost struct{ b *Broker }

func (h stretchedHost) DeclaredFailed() map[string]bool { return h.b.fo.DeclaredFailed() }

func (h stretchedHost) RollNext(mls map[string]bool) {
	for _, t := range h.b.loadedTopics() {
		if mls[t.ml.Name()] {
			t.ml.RollNext()
		}
	}
}

// stretchedLedgerConfig adapts a topic's managed-ledger config to a
// stretched namespace.
func (b *Broker) stretchedLedgerConfig(mlc *mledger.Config, pol meta.Policies) error {
	if b.stretched == nil {
		return fmt.Errorf("%w: namespace mode stretched needs a multi-region broker (a global store and the region's bookie view)", meta.ErrNotAllowed)
	}
	return b.stretched.LedgerConfig(mlc, pol)
}
