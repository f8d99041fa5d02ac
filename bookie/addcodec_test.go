package bookie

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/meridian-mq/meridian/proto/bookiepb"
)

// sameAsProto fails unless r holds what proto.Unmarshal made of the same
// bytes.
func sameAsProto(t *testing.T, r *recvAdd, want *bookiepb.AddRequest) {
	t.Helper()
	got := &bookiepb.AddRequest{RequestId: r.requestID, LedgerId: r.ledgerID, EntryId: r.entryID, Lac: r.lac,
		Payload: r.payload, Digest: r.digest, Recovery: r.recovery}
	if got.RequestId != want.RequestId || got.LedgerId != want.LedgerId || got.EntryId != want.EntryId ||
		got.Lac != want.Lac || got.Digest != want.Digest || got.Recovery != want.Recovery || !bytes.Equal(got.Payload, want.Payload) {
		t.Fatalf("decoded %v, proto.Unmarshal gives %v", got, want)
	}
}

func TestRecvAddDecodesAsProtoUnmarshal(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	ints := []int64{0, 1, -1, 127, 128, math.MaxInt64, math.MinInt64, 1 << 40}
	for i := range 2000 {
		m := &bookiepb.AddRequest{
			RequestId: rng.Uint64(),
			LedgerId:  ints[rng.IntN(len(ints))] + int64(rng.IntN(3)),
			EntryId:   ints[rng.IntN(len(ints))],
			Lac:       ints[rng.IntN(len(ints))] - int64(rng.IntN(2)),
			Digest:    rng.Uint32(),
			Recovery:  rng.IntN(2) == 0,
		}
		if n := rng.IntN(3); n > 0 {
			m.Payload = make([]byte, rng.IntN(3000*n))
			for j := range m.Payload {
				m.Payload[j] = byte(rng.Uint32())
			}
		}
		b, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		// What a newer client could send: unknown fields of every wire
		// type, a repeated field (the last one wins), a known field
		// with a wire type it does not have (skipped, as proto does).
		switch i % 5 {
		case 1:
			b = protowire.AppendTag(b, 99, protowire.BytesType)
			b = protowire.AppendBytes(b, []byte("future"))
			b = protowire.AppendTag(b, 100, protowire.Fixed64Type)
			b = protowire.AppendFixed64(b, 7)
			b = protowire.AppendTag(b, 101, protowire.Fixed32Type)
			b = protowire.AppendFixed32(b, 7)
			b = protowire.AppendTag(b, 102, protowire.StartGroupType)
			b = protowire.AppendTag(b, 1, protowire.VarintType)
			b = protowire.AppendVarint(b, 5)
			b = protowire.AppendTag(b, 102, protowire.EndGroupType)
		case 2:
			b = protowire.AppendTag(b, addFieldEntryID, protowire.VarintType)
			b = protowire.AppendVarint(b, 12345)
			b = protowire.AppendTag(b, addFieldPayload, protowire.BytesType)
			b = protowire.AppendBytes(b, []byte("second payload wins"))
		case 3:
			b = protowire.AppendTag(b, addFieldLedgerID, protowire.Fixed64Type)
			b = protowire.AppendFixed64(b, 42)
		}
		want := &bookiepb.AddRequest{}
		if err := proto.Unmarshal(b, want); err != nil {
			t.Fatalf("proto.Unmarshal: %v", err)
		}
		var r recvAdd
		if err := r.decode(b); err != nil {
			t.Fatalf("decode: %v", err)
		}
		sameAsProto(t, &r, want)
		clear(b)
		if len(r.payload) > 0 && !bytes.Equal(r.payload, make([]byte, len(r.payload))) {
			t.Fatal("payload is a copy, want it to alias the input")
		}
	}
}

func TestRecvAddRefusesMalformed(t *testing.T) {
	m := &bookiepb.AddRequest{RequestId: 1, LedgerId: 2, EntryId: 3, Payload: bytes.Repeat([]byte("x"), 100)}
	b, _ := proto.Marshal(m)
	for cut := 1; cut < len(b); cut++ {
		var r recvAdd
		errDecode := r.decode(b[:cut])
		errProto := proto.Unmarshal(b[:cut], &bookiepb.AddRequest{})
		if (errDecode == nil) != (errProto == nil) {
			t.Fatalf("%d of %d bytes: decode says %v, proto.Unmarshal %v", cut, len(b), errDecode, errProto)
		}
	}
}

func FuzzRecvAddDecode(f *testing.F) {
	b, _ := proto.Marshal(&bookiepb.AddRequest{RequestId: 9, LedgerId: -1, EntryId: 3, Lac: 2, Payload: []byte("abc"), Digest: 77, Recovery: true})
	f.Add(b)
	f.Add([]byte{})
	f.Add([]byte{0x2a, 0x80})
	f.Fuzz(func(t *testing.T, b []byte) {
		want := &bookiepb.AddRequest{}
		errProto := proto.Unmarshal(b, want)
		var r recvAdd
		errDecode := r.decode(b)
		if (errDecode == nil) != (errProto == nil) {
			t.Fatalf("decode says %v, proto.Unmarshal %v", errDecode, errProto)
		}
		if errProto == nil {
			sameAsProto(t, &r, want)
		}
	})
}

// TestAddPayloadsSurviveReceiveBufferReuse: an add's payload aliases the
// gRPC receive buffer, which goes back to the pool only when the store is
// done with the add. Many streams send distinct payloads while the
// committer holds each group for a while (so later messages are received
// into pooled buffers while earlier adds still wait); every entry must read
// back as sent.
func TestAddPayloadsSurviveReceiveBufferReuse(t *testing.T) {
	cfg := testConfig(t, t.TempDir())
	cfg.GroupCommitMaxDelay = 5 * time.Millisecond
	_, c := startServer(t, cfg, nil)
	payload := func(l, e int64) []byte {
		p := make([]byte, 1000+int(e%7)*9000) // one HTTP/2 frame and several
		for i := range p {
			p[i] = byte(l*31 + e*7 + int64(i))
		}
		return p
	}
	const streams, perStream = 4, 150
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, streams)
	for s := range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st, err := c.AddEntries(ctx)
			if err != nil {
				errs <- err
				return
			}
			l := int64(100 + s)
			for e := range int64(perStream) {
				if err := st.Send(addReq(uint64(e+1), l, e, e-1, payload(l, e))); err != nil {
					errs <- err
					return
				}
			}
			for range perStream {
				r, err := st.Recv()
				if err != nil {
					errs <- err
					return
				}
				if r.Status != bookiepb.Status_OK {
					errs <- fmt.Errorf("add %d/%d: %v %s", r.LedgerId, r.EntryId, r.Status, r.Message)
					return
				}
			}
			st.CloseSend()
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for s := range streams {
		l := int64(100 + s)
		for e := range int64(perStream) {
			r, err := c.ReadEntry(ctx, &bookiepb.ReadEntryRequest{LedgerId: l, EntryId: e})
			if err != nil || r.Status != bookiepb.Status_OK {
				t.Fatalf("read %d/%d: %v %v", l, e, err, r.GetStatus())
			}
			if !bytes.Equal(r.Payload, payload(l, e)) {
				t.Fatalf("entry %d/%d reads back different bytes than were added", l, e)
			}
		}
	}
}
