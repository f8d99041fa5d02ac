package main

import (
	"github.com/meridian-mq/meridian/broker"
	"github.com/spf13/pflag"
)

// delayedFlags size the delayed-delivery index (broker.Config), shared by
// `meridian broker` and `meridian standalone`. Each 0 is the broker's
// default.
type delayedFlags struct {
	bucketEntries, segmentEntries, maxBuckets int
}

func (d *delayedFlags) register(f *pflag.FlagSet) {
	f.IntVar(&d.bucketEntries, "delayed-bucket-entries", 0, "delayed messages a Shared or Key_Shared subscription holds in memory before sealing them into a persisted bucket (0: the broker default, 50000; -1: never, every delayed message stays in memory)")
	f.IntVar(&d.segmentEntries, "delayed-segment-entries", 0, "delayed messages per segment of a persisted bucket, the unit loaded back when due (0: the broker default, 1000)")
	f.IntVar(&d.maxBuckets, "delayed-max-buckets", 0, "persisted buckets of a subscription's delayed-delivery index beyond which 2 to 4 adjacent ones are merged into one (Pulsar's delayedDeliveryMaxNumBuckets; 0: the broker default, 50; -1: never merge)")
}

func (d *delayedFlags) apply(c *broker.Config) {
	c.DelayedBucketEntries, c.DelayedSegmentEntries, c.DelayedMaxBuckets = d.bucketEntries, d.segmentEntries, d.maxBuckets
}
