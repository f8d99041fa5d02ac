package digest

import (
	"hash/crc32"
	"testing"
)

func TestDigestIsCRC32COverHeaderAndPayload(t *testing.T) {
	want := crc32.Checksum(append([]byte{
		0, 0, 0, 0, 0, 0, 0, 7, // ledger
		0, 0, 0, 0, 0, 0, 0, 3, // entry
		0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, // lac -1
	}, "hello"...), crc32.MakeTable(crc32.Castagnoli))
	if got := Entry(7, 3, -1, []byte("hello")); got != want {
		t.Fatalf("Digest = %08x, want %08x", got, want)
	}
	if Entry(7, 3, 1, []byte("hello")) == want {
		t.Fatal("the LAC must be covered by the digest")
	}
}
