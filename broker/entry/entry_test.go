package entry

import (
	"bytes"
	"testing"

	"github.com/meridian-mq/meridian/broker/mledger"
)

// TestEncodeFramedEntry: the entry written in front of a framed message is
// byte for byte encodeEntry's, in the message's own buffer when the room
// before it holds the header, in a new one otherwise; the message itself
// is never changed.
func TestEncodeFramedEntry(t *testing.T) {
	msg := []byte("the message bytes, from the 0x0e01 magic on")
	for _, o := range []Origin{{Seq: 7}, {Region: "us-east", Seq: 1 << 40, ID: mledger.Position{Ledger: 3, Entry: 9}}} {
		h := entryHeaderV2Min + len(o.Region)
		want := Encode(1700000000123, o, msg)
		for _, room := range []int{0, 1, h - 1, h, h + 20} {
			buf := append(bytes.Repeat([]byte{0xaa}, room), msg...)
			got := EncodeFramed(1700000000123, o, Framed{Buf: buf, Off: room})
			if !bytes.Equal(got, want) {
				t.Fatalf("region %q, room %d: entry\n% x\nwant\n% x", o.Region, room, got, want)
			}
			if !bytes.Equal(buf[room:], msg) {
				t.Fatalf("region %q, room %d: the message changed", o.Region, room)
			}
			inPlace := &got[len(got)-1] == &buf[len(buf)-1]
			if inPlace != (room >= h) {
				t.Fatalf("region %q, room %d (header %d): written in place %v", o.Region, room, h, inPlace)
			}
			if d, err := Decode(got); err != nil || d.Origin != o || !bytes.Equal(d.Msg, msg) || d.PublishMs != 1700000000123 {
				t.Fatalf("region %q, room %d: decodes as %+v, %v", o.Region, room, d, err)
			}
		}
	}
}
