package main

import (
	"time"

	"github.com/meridian-mq/meridian/broker"
	"github.com/meridian-mq/meridian/internal/config"
	"github.com/spf13/pflag"
)

// verifierFlags configure the background replication verifier
// (replication.VerifierConfig) of `meridian broker`.
type verifierFlags struct {
	period, settle time.Duration
	rate           int
}

func (v *verifierFlags) register(f *pflag.FlagSet) {
	f.DurationVar(&v.period, "replication-verify-period", 0, "how often the owner of each replicated topic verifies its region's entries against every other region's copy (meridian_replication_verify_*_entries; 0: off)")
	f.IntVar(&v.rate, "replication-verify-rate", 0, "entries a second the background verifier reads at most (0: 5000)")
	f.DurationVar(&v.settle, "replication-verify-settle", 0, "entries published this recently are not compared by the background verifier, still in flight (0: 30s)")
}

// verifierRules are the checks of its keys.
var verifierRules = map[string]config.Rule{
	"broker.replication_verify_period": config.DurationMin(0, "0: off"),
	"broker.replication_verify_rate":   config.IntMin(0, "0: 5000"),
	"broker.replication_verify_settle": config.DurationMin(0, "0: 30s"),
}

func (v *verifierFlags) apply(c *broker.Config) {
	c.ReplicationVerifier.Period, c.ReplicationVerifier.RateEntries, c.ReplicationVerifier.Settle = v.period, v.rate, v.settle
}
