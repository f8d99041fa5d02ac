package broker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/meridian-mq/meridian/broker/failoverctl"
	"github.com/meridian-mq/meridian/broker/mledger"
	"github.com/meridian-mq/meridian/cluster"
	"github.com/meridian-mq/meridian/internal/healthz"
)

// The broker's answers to a prober (internal/healthz), served on its
// admin port without credentials: /healthz, /readyz, /status.html.
//
// Live: the policy loop turns (it runs every PolicyCheckInterval, each
// pass bounded by its deadlines). Ready, in this order: the region's
// metadata store answers a read; the broker holds its registration lease;
// an ack quorum of bookies is writable (fewer, and no ledger can be
// created or written); its region is not fenced by a failover epoch (it
// held an active-standby namespace's lease at the epoch it knows and the
// lease lapsed unrenewed: cut off from the global store's quorum, it
// acknowledges no produce for that namespace — green again once it
// renews, or sees the epoch that moved the namespace, and redirects as a
// standby region's broker does); the broker is not stopping (Close
// drains first, and serves on for Config.ShutdownDrainDelay).

// healthProbeKey is read (and never written) by the metadata-store check.
const healthProbeKey = "/healthz-probe"

// newHealth returns the broker's checker over its configuration (cfg,
// with defaults), its region's registration (own returns it, nil before
// it started) and its active-standby namespaces' leases (none before the
// failover shell started), and the func the policy loop calls on each
// turn.
func newHealth(cfg Config, own func() *ownership, leases func() []failoverctl.NamespaceLease) (*healthz.Checker, func()) {
	h := healthz.New()
	// Two passes' worth, each pass bounded by its two 30 s deadlines.
	turned := h.Loop("policy-loop", 2*cfg.PolicyCheckInterval+75*time.Second)
	h.Ready("metadata-store", func(ctx context.Context) error {
		_, err := cfg.Store.Get(ctx, healthProbeKey)
		if errors.Is(err, cluster.ErrNotFound) {
			return nil
		}
		return err
	})
	h.Ready("registration", func(context.Context) error {
		o := own()
		if o == nil {
			return errors.New("not registered yet")
		}
		l := o.currentLease()
		if l == nil {
			return errors.New("no registration lease")
		}
		select {
		case <-l.Lost():
			return errors.New("registration lease lost")
		default:
			return nil
		}
	})
	h.Ready("bookies", func(context.Context) error {
		qa := cfg.ManagedLedger.AckQuorum
		if qa == 0 {
			qa = mledger.DefaultConfig().AckQuorum
		}
		if n := cfg.Ledgers.WritableBookies(); n < qa {
			return fmt.Errorf("%d writable bookies, the ack quorum needs %d", n, qa)
		}
		return nil
	})
	h.Ready("region-fenced", func(context.Context) error {
		for _, l := range leases() {
			if l.Lapsed {
				return fmt.Errorf("namespace %s: this region's lease at epoch %d lapsed unrenewed (no produce acknowledged for it)", l.Namespace, l.Epoch)
			}
		}
		return nil
	})
	return h, turned
}
