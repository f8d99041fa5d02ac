package failoverctl

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/meridian-mq/meridian/broker/mledger"
)

// The write probe: a canary write through the region's real write path,
// whose result every broker publishes in its gossip tags
// (cluster.ProbeTags) so the failover health view sees a region whose
// brokers answer gossip while its etcd or its bookies do not take writes.
//
// One probe, every ProbeInterval, bounded by ProbeTimeout:
//
//  1. a write of /probe/brokers/ID in the region's store (an etcd quorum
//     write: the store topics, cursors and ownership depend on);
//  2. an append to the broker's own probe managed ledger
//     "meridian-probe/ID" on the region's bookies with the topics'
//     quorums (an entry fsynced on the ack quorum, exactly as a produce);
//  3. reading that entry back and checking its bytes.
//
// Any step failing or not finishing within ProbeTimeout publishes "fail";
// all three publish "ok". The probe ledger keeps no cursor and no
// retention, so each rolled-over ledger (every MaxEntriesPerLedger probes)
// is deleted: the probe costs one small entry and one etcd write per
// interval. A probe ledger that failed is closed and opened afresh on the
// next probe, so a region that heals reports ok again.

const probeLedgerEntries = 600 // a new probe ledger every 10 minutes at 1 s

// probeLoop runs until the broker closes.
func (sh *Shell) probeLoop() {
	defer sh.wg.Done()
	var ml *mledger.ManagedLedger
	defer func() {
		if ml != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			_ = ml.Close(ctx)
			cancel()
		}
	}()
	tick := time.NewTicker(sh.cfg.ProbeInterval)
	defer tick.Stop()
	var seq uint64
	for {
		seq++
		at := time.Now()
		ctx, cancel := context.WithTimeout(sh.ctx, sh.cfg.ProbeTimeout)
		err := sh.probeOnce(ctx, &ml, seq)
		cancel()
		if sh.ctx.Err() != nil {
			return
		}
		ok := err == nil
		if sh.cfg.Probed != nil {
			sh.cfg.Probed(ok, time.Since(at))
		}
		if !ok {
			sh.log.Warn("write probe failed", "err", err, "took", time.Since(at).Round(time.Millisecond))
			if ml != nil { // a failed ledger is not trusted again
				go func(ml *mledger.ManagedLedger) {
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					_ = ml.Close(ctx)
					cancel()
				}(ml)
				ml = nil
			}
		}
		sh.cfg.PublishProbe(ok, at)
		select {
		case <-sh.ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// probeOnce runs the three steps; *ml is opened on first use.
func (sh *Shell) probeOnce(ctx context.Context, ml **mledger.ManagedLedger, seq uint64) error {
	var payload [24]byte
	copy(payload[:8], "mprobe01")
	binary.BigEndian.PutUint64(payload[8:], seq)
	binary.BigEndian.PutUint64(payload[16:], uint64(time.Now().UnixNano()))
	if _, err := sh.cfg.Store.Put(ctx, "/probe/brokers/"+sh.cfg.BrokerID, payload[8:]); err != nil {
		return fmt.Errorf("region store write: %w", err)
	}
	if *ml == nil {
		c := sh.cfg.ManagedLedger
		c.MaxEntriesPerLedger = probeLedgerEntries
		c.RetentionTime, c.RetentionSizeBytes = 0, 0
		m, err := mledger.Open(ctx, "meridian-probe/"+sh.cfg.BrokerID, c)
		if err != nil {
			return fmt.Errorf("open probe ledger: %w", err)
		}
		*ml = m
	}
	pos, err := (*ml).Append(ctx, payload[:])
	if err != nil {
		return fmt.Errorf("append: %w", err)
	}
	es, err := (*ml).ReadEntries(ctx, pos, 1, 1<<10)
	if err != nil {
		return fmt.Errorf("read back %v: %w", pos, err)
	}
	if len(es) != 1 || es[0].Pos != pos || string(es[0].Data) != string(payload[:]) {
		return errors.New("read back: not the entry written")
	}
	return nil
}
