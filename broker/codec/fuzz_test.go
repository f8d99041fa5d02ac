package codec

import (
	"bytes"
	"errors"
	"io"
	"runtime"
	"testing"

	"google.golang.org/protobuf/proto"

	pb "github.com/meridian-mq/meridian/proto/pulsarpb"
)

// FuzzDecode feeds arbitrary bytes to every decoding entry point
// (Decoder, ParseFrame, ParseMessage, VerifyChecksum, ParseBatch). None may
// panic; none may allocate in proportion to a length field rather than to
// the bytes actually present; and a frame that parses must re-encode to a
// frame that parses to the same command and payload. Seeds: one frame of
// each reply the broker builds, payload frames, and frames captured from
// pulsar-client-go (testdata/fuzz/FuzzDecode/client-*, written by
// `go test -run Interop -update-corpus`).
func FuzzDecode(f *testing.F) {
	for _, cmd := range simpleCommands() {
		b, err := AppendCommand(nil, cmd)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	msg := mustMessage(f, testMeta(7), []byte("payload"))
	f.Add(msg)
	f.Add(mustAppendPayload(f, nil, sendCmd(1, 7), nil, msg))
	f.Add(mustAppendPayload(f, nil, Message(2, MessageID(1, 0), 0, []int64{5}),
		&pb.BrokerEntryMetadata{BrokerTimestamp: proto.Uint64(1), Index: proto.Uint64(2)}, msg))
	var batch []byte
	for i := range 3 {
		var err error
		if batch, err = AppendBatchEntry(batch, &pb.SingleMessageMetadata{SequenceId: proto.Uint64(uint64(i))}, []byte("x")); err != nil {
			f.Fatal(err)
		}
	}
	meta := testMeta(0)
	meta.NumMessagesInBatch = proto.Int32(3)
	f.Add(mustMessage(f, meta, batch))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 4})

	f.Fuzz(func(t *testing.T, data []byte) {
		// The first decode of a message type in a process builds its
		// protobuf coders (up to 42 KiB for CommandSubscribe, once): that
		// is not the input's cost, and it made a CI run fail on a 26-byte
		// input (testdata/fuzz/FuzzDecode/first-decode-of-a-type). Decode
		// once unmeasured; what the input itself costs recurs every time.
		decodeAll(t, data)
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		decodeAll(t, data)
		runtime.ReadMemStats(&after)
		// The Decoder's read buffer is 32 KiB, a frame's first allocation
		// at most readGrowStep plus readHeadroom (rounded up to whole
		// pages by the allocator); protobuf decoding allocates some
		// structs per input byte at worst. A length field honoured before
		// its bytes arrived would cost up to DefaultMaxFrameSize.
		if got, limit := after.TotalAlloc-before.TotalAlloc, uint64(readBufferSize+readGrowStep+readHeadroom+8<<10+512*len(data)); got > limit {
			t.Fatalf("decoding %d bytes allocated %d bytes (limit %d)", len(data), got, limit)
		}
	})
}

func decodeAll(t *testing.T, data []byte) {
	d := NewDecoder(bytes.NewReader(data), DefaultMaxFrameSize)
	for range len(data)/4 + 1 { // every Next consumes at least 4 bytes
		fr, err := d.Next()
		if err != nil && !errors.Is(err, ErrFrameTooLarge) && !errors.Is(err, ErrUnknownCommand) {
			if err != io.EOF && err != io.ErrUnexpectedEOF && !errors.Is(err, ErrMalformed) {
				t.Fatalf("Decoder.Next: unexpected error class: %v", err)
			}
			break
		}
		if err == nil {
			checkReencode(t, fr)
		}
	}

	if fr, err := ParseFrame(data); err == nil {
		checkReencode(t, fr)
	} else if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrUnknownCommand) {
		t.Fatalf("ParseFrame: unexpected error class: %v", err)
	}

	_ = VerifyChecksum(data)
	if meta, payload, err := ParseMessage(data); err == nil {
		if n := meta.GetNumMessagesInBatch(); meta.NumMessagesInBatch != nil {
			_, _ = ParseBatch(payload, int(n))
		}
	} else if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrBadChecksum) {
		t.Fatalf("ParseMessage: unexpected error class: %v", err)
	}
	if len(data) > 0 {
		_, _ = ParseBatch(data[1:], int(data[0]))
	}
}

// checkReencode: a decoded frame encodes again, and that encoding decodes
// to the same command (compared by deterministic encoding), payload and
// broker-entry metadata.
func checkReencode(t *testing.T, fr Frame) {
	var b []byte
	var err error
	if fr.Payload != nil {
		b, err = AppendPayloadCommand(nil, fr.Cmd, fr.BrokerEntryMetadata, fr.Payload)
	} else {
		b, err = AppendCommand(nil, fr.Cmd)
	}
	if err != nil {
		t.Fatalf("re-encode %v: %v", fr.Cmd.GetType(), err)
	}
	again, err := ParseFrame(b)
	if err != nil {
		t.Fatalf("re-encoded %v does not parse: %v", fr.Cmd.GetType(), err)
	}
	det := proto.MarshalOptions{Deterministic: true}
	x, _ := det.Marshal(fr.Cmd)
	y, _ := det.Marshal(again.Cmd)
	if !bytes.Equal(x, y) || !bytes.Equal(fr.Payload, again.Payload) {
		t.Fatalf("re-encode changed the frame:\n%v\n%v", fr.Cmd, again.Cmd)
	}
	x, _ = det.Marshal(fr.BrokerEntryMetadata)
	y, _ = det.Marshal(again.BrokerEntryMetadata)
	if !bytes.Equal(x, y) {
		t.Fatalf("re-encode changed the broker-entry metadata")
	}
}
