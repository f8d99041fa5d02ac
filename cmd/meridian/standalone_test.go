package main

import (
	"testing"

	"github.com/meridian-mq/meridian/bookie"
)

// The standalone's bookies use the smaller memtable; everything else is the
// bookie default.
func TestStandaloneBookieConfig(t *testing.T) {
	c := standaloneBookieConfig()
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
