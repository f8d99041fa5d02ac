package replication

import (
	"context"
	"time"

	"github.com/meridian-mq/meridian/internal/clock"
)

// The background verifier: every VerifierConfig.Period, the owner broker
// of each loaded topic that replicates verifies its own region's entries
// (this region as the origin) against every other region, reading at
// most RateEntries entries a second, and publishes, per remote region,
// the entries found missing and mismatched there (Status, and the
// metrics meridian_replication_verify_missing_entries and
// meridian_replication_verify_mismatched_entries). Each region verifies
// its own origin, so every origin is covered once. It reads the managed
// ledgers like any reader, from its own goroutine: off the produce path.

// VerifierConfig configures the background verifier.
type VerifierConfig struct {
	// Period: how often each topic is verified. 0: off (the default: a
	// verification reads every region's copy of every topic; at 10 min
	// and the default rate, a topic of 3,000,000 entries is read in full
	// in each region every period).
	Period time.Duration
	// RateEntries bounds the entries a second the verifier reads, over
	// all regions and topics (chunks are paced). 0: 5,000.
	RateEntries int
	// Settle: an origin's entries published within Settle of a
	// verification's start are not compared (still in flight). 0: 30 s.
	Settle time.Duration
}

func (c VerifierConfig) withDefaults() VerifierConfig {
	if c.RateEntries <= 0 {
		c.RateEntries = 5000
	}
	if c.Settle <= 0 {
		c.Settle = 30 * time.Second
	}
	return c
}

// verifyResult is a topic's last background verification against one
// remote region.
type verifyResult struct {
	at                  time.Time
	missing, mismatched uint64
}

// verifierLoop runs until the service closes.
func (svc *Service) verifierLoop(cfg VerifierConfig) {
	defer svc.wg.Done()
	cfg = cfg.withDefaults()
	pace := func(ctx context.Context, n int) error {
		return sleepCtx(ctx, svc.clock, time.Duration(n)*time.Second/time.Duration(cfg.RateEntries))
	}
	for {
		if err := sleepCtx(svc.ctx, svc.clock, cfg.Period); err != nil {
			return
		}
		for _, t := range svc.host.Topics() {
			if t == nil || len(t.senderStatus()) == 0 {
				continue // not replicated, or not its owner
			}
			if err := t.verifyInBackground(svc.ctx, cfg.Settle, pace); err != nil {
				if svc.ctx.Err() != nil {
					return
				}
				svc.log.Warn("background replication verification", "topic", t.name.String(), "err", err)
			}
		}
	}
}

// verifyInBackground verifies this region's entries of the topic against
// the other regions and records the result per remote.
func (t *Topic) verifyInBackground(ctx context.Context, settle time.Duration, pace func(context.Context, int) error) error {
	svc := t.svc
	pol := t.log.Policies()
	run := verifyRun{settle: settle, pace: pace, origins: []string{svc.cfg.Cluster}}
	tv, err := svc.verifyTopic(ctx, t.name.String(), sortedRegions(pol.ReplicationClusters), run)
	if err != nil {
		return err
	}
	now := svc.clock.Now()
	res := map[string]verifyResult{}
	for _, o := range tv.Origins {
		for _, r := range o.Regions {
			res[r.Region] = verifyResult{at: now, missing: r.MissingEntries, mismatched: r.MismatchedEntries}
		}
	}
	t.verifyMu.Lock()
	t.verified = res
	t.verifyMu.Unlock()
	return nil
}

// sleepCtx sleeps d on c, or until ctx is done (its error).
func sleepCtx(ctx context.Context, c clock.Clock, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	tm := c.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
