package main

import (
	"testing"

	"github.com/meridian-mq/meridian/bookie"
)

// The standalone's bookies use the smaller memtable; everything else is the
// bookie default.
func TestStandaloneBookieConfig(t *testing.T) {
	c := standaloneBookieConfig(5 << 20)
	if c.MemTableSizeBytes != 16<<20 || c.MemTableSizeBytes == bookie.DefaultMemTableSizeBytes {
		t.Fatalf("standalone memtable %d, bookie default %d", c.MemTableSizeBytes, bookie.DefaultMemTableSizeBytes)
	}
	c.MemTableSizeBytes = bookie.DefaultMemTableSizeBytes
	if d := bookie.DefaultConfig(); c.ListenAddr != d.ListenAddr || c.GroupCommitMaxBytes != d.GroupCommitMaxBytes || c.MaxEntryBytes != d.MaxEntryBytes {
		t.Fatalf("standalone bookie config differs from the default beyond the memtable: %+v", c)
	}
	c.DataDir, c.ID = t.TempDir(), "bookie-1" // set per bookie by the standalone
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
}

// A message is one entry on the bookies (a chunked one, one per chunk): a
// standalone whose max message size is above the bookie default gets
// bookies that take entries of that size plus the same room for headers;
// at or below it, the default stays.
func TestStandaloneBookieEntryLimitFollowsMaxMessageSize(t *testing.T) {
	for _, c := range []struct{ msg, want int }{
		{1 << 20, bookie.DefaultMaxEntryBytes},
		{5 << 20, bookie.DefaultMaxEntryBytes},
		{20 << 20, 20<<20 + 64<<10},
	} {
		if got := standaloneBookieConfig(c.msg).MaxEntryBytes; got != c.want {
			t.Errorf("max message size %d: bookie max entry %d, want %d", c.msg, got, c.want)
		}
	}
}
