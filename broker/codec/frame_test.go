package codec

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"testing"
	"testing/iotest"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	pb "github.com/meridian-mq/meridian/proto/pulsarpb"
)

// simpleCommands is one of each reply the broker builds, with zero ids.
func simpleCommands() []*pb.BaseCommand {
	return []*pb.BaseCommand{
		Connected("meridian", 20, 1<<20, true),
		Success(0),
		Error(0, pb.ServerError_TopicNotFound, "no such topic"),
		PartitionedMetadata(0, 0),
		PartitionedMetadataFailed(1, pb.ServerError_ServiceNotReady, "starting"),
		LookupConnect(2, "pulsar://127.0.0.1:6650", "", false),
		LookupRedirect(3, "pulsar://b:6650", "pulsar+ssl://b:6651", true),
		LookupFailed(4, pb.ServerError_MetadataError, ""),
		ProducerSuccess(0, "p-1", -1, nil),
		SendReceipt(0, 0, 0, 1, 0),
		SendError(0, 7, pb.ServerError_ChecksumError, "bad crc"),
		ActiveConsumerChange(0, true),
		AckResponse(0, 9),
		AckResponseError(0, 9, pb.ServerError_UnknownError, "failed"),
		CloseProducer(0, 10, "pulsar://c:6650", ""),
		CloseConsumer(0, 11, "", ""),
		TopicMigrated(0, pb.CommandTopicMigrated_Producer, "pulsar://other:6650", ""),
		LastMessageID(12, MessageID(0, math.MaxUint64), nil),
		TopicsOfNamespace(13, []string{"persistent://public/default/a"}, true, "h"),
		GetSchemaResponse(14, &pb.Schema{Name: proto.String("s"), SchemaData: []byte{}, Type: pb.Schema_String.Enum()}, []byte{0}),
		GetSchemaError(15, pb.ServerError_TopicNotFound, "none"),
		GetOrCreateSchemaResponse(16, []byte{1}),
		GetOrCreateSchemaError(17, pb.ServerError_IncompatibleSchema, "no"),
		Ping(),
		Pong(),
	}
}

func testMeta(seq uint64) *pb.MessageMetadata {
	return &pb.MessageMetadata{
		ProducerName: proto.String("p-1"),
		SequenceId:   proto.Uint64(seq),
		PublishTime:  proto.Uint64(1700000000000),
		PartitionKey: proto.String("key"),
	}
}

func mustMessage(t testing.TB, meta *pb.MessageMetadata, payload []byte) []byte {
	t.Helper()
	b, err := EncodeMessage(meta, payload)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func sendCmd(producerID, seq uint64) *pb.BaseCommand {
	return &pb.BaseCommand{Type: pb.BaseCommand_SEND.Enum(), Send: &pb.CommandSend{ProducerId: proto.Uint64(producerID), SequenceId: proto.Uint64(seq)}}
}

func mustAppend(t testing.TB, dst []byte, cmd *pb.BaseCommand) []byte {
	t.Helper()
	out, err := AppendCommand(dst, cmd)
	if err != nil {
		t.Fatalf("AppendCommand(%v): %v", cmd.GetType(), err)
	}
	return out
}

func mustAppendPayload(t testing.TB, dst []byte, cmd *pb.BaseCommand, bem *pb.BrokerEntryMetadata, payload []byte) []byte {
	t.Helper()
	out, err := AppendPayloadCommand(dst, cmd, bem, payload)
	if err != nil {
		t.Fatalf("AppendPayloadCommand(%v): %v", cmd.GetType(), err)
	}
	return out
}

// TestSimpleFramesRoundTrip: every reply builder frames with AppendCommand
// into [totalSize][cmdSize][cmd] and decodes back equal, both through
// ParseFrame and through a Decoder reading one byte at a time.
func TestSimpleFramesRoundTrip(t *testing.T) {
	var stream []byte
	for _, cmd := range simpleCommands() {
		frame := mustAppend(t, nil, cmd)
		if got := binary.BigEndian.Uint32(frame); int(got) != len(frame)-4 {
			t.Fatalf("%v: totalSize %d, frame has %d bytes after it", cmd.GetType(), got, len(frame)-4)
		}
		if got := binary.BigEndian.Uint32(frame[4:]); int(got) != len(frame)-8 {
			t.Fatalf("%v: cmdSize %d, want %d", cmd.GetType(), got, len(frame)-8)
		}
		f, err := ParseFrame(frame)
		if err != nil {
			t.Fatalf("%v: ParseFrame: %v", cmd.GetType(), err)
		}
		if !proto.Equal(f.Cmd, cmd) || f.Payload != nil || f.BrokerEntryMetadata != nil {
			t.Fatalf("%v: round trip gave %v", cmd.GetType(), f)
		}
		stream = append(stream, frame...)
	}
	d := NewDecoder(iotest.OneByteReader(bytes.NewReader(stream)), 0)
	for _, want := range simpleCommands() {
		f, err := d.Next()
		if err != nil {
			t.Fatalf("Next (want %v): %v", want.GetType(), err)
		}
		if !proto.Equal(f.Cmd, want) {
			t.Fatalf("Next = %v, want %v", f.Cmd, want)
		}
	}
	if _, err := d.Next(); err != io.EOF {
		t.Fatalf("Next at end of stream = %v, want io.EOF", err)
	}
}

// TestPayloadFramesRoundTrip: a SEND's message part comes out of the frame
// byte-identical, and so does a MESSAGE carrying it with broker-entry
// metadata, so a broker can store and return a producer's bytes verbatim.
func TestPayloadFramesRoundTrip(t *testing.T) {
	msg := mustMessage(t, testMeta(0), []byte("hello"))
	send := mustAppendPayload(t, nil, sendCmd(0, 0), nil, msg)
	bem := &pb.BrokerEntryMetadata{BrokerTimestamp: proto.Uint64(1700000000001), Index: proto.Uint64(0)}
	deliver := mustAppendPayload(t, nil, Message(0, MessageID(1, 0), 0, nil), bem, msg)

	for name, tc := range map[string]struct {
		frame []byte
		bem   *pb.BrokerEntryMetadata
	}{"send": {send, nil}, "message": {deliver, bem}} {
		for _, r := range []struct {
			name string
			read func([]byte) (Frame, error)
		}{
			{"ParseFrame", ParseFrame},
			{"Decoder", func(b []byte) (Frame, error) {
				return NewDecoder(iotest.HalfReader(bytes.NewReader(b)), 0).Next()
			}},
		} {
			f, err := r.read(tc.frame)
			if err != nil {
				t.Fatalf("%s/%s: %v", name, r.name, err)
			}
			if !bytes.Equal(f.Payload, msg) {
				t.Fatalf("%s/%s: payload\n% x\nwant\n% x", name, r.name, f.Payload, msg)
			}
			if !proto.Equal(f.BrokerEntryMetadata, tc.bem) {
				t.Fatalf("%s/%s: broker-entry metadata %v, want %v", name, r.name, f.BrokerEntryMetadata, tc.bem)
			}
			meta, payload, err := ParseMessage(f.Payload)
			if err != nil {
				t.Fatalf("%s/%s: ParseMessage: %v", name, r.name, err)
			}
			if !proto.Equal(meta, testMeta(0)) || string(payload) != "hello" {
				t.Fatalf("%s/%s: message %v %q", name, r.name, meta, payload)
			}
		}
	}
}

// TestChecksumCoversMetadataAndPayload: flipping any bit after the
// checksum field is ErrBadChecksum; the frame itself still decodes, since
// a bad checksum on SEND is answered with SEND_ERROR, not a closed
// connection.
func TestChecksumCoversMetadataAndPayload(t *testing.T) {
	msg := mustMessage(t, testMeta(3), []byte("payload"))
	if err := VerifyChecksum(msg); err != nil {
		t.Fatal(err)
	}
	// The checksum is CRC32C over everything after it.
	if got, want := binary.BigEndian.Uint32(msg[2:]), crc32c(msg[6:]); got != want {
		t.Fatalf("checksum %#x, want CRC32C %#x", got, want)
	}
	for i := 6; i < len(msg); i++ {
		bad := bytes.Clone(msg)
		bad[i] ^= 0x10
		if i >= 6 && i < 10 {
			// A corrupt metadata size may also be caught as malformed.
			if err := VerifyChecksum(bad); !errors.Is(err, ErrBadChecksum) && !errors.Is(err, ErrMalformed) {
				t.Fatalf("byte %d flipped: %v", i, err)
			}
			continue
		}
		if _, _, err := ParseMessage(bad); !errors.Is(err, ErrBadChecksum) {
			t.Fatalf("byte %d flipped: ParseMessage = %v, want ErrBadChecksum", i, err)
		}
		f, err := ParseFrame(mustAppendPayload(t, nil, sendCmd(1, 3), nil, bad))
		if err != nil {
			t.Fatalf("byte %d flipped: frame rejected: %v", i, err)
		}
		if err := VerifyChecksum(f.Payload); !errors.Is(err, ErrBadChecksum) {
			t.Fatalf("byte %d flipped: VerifyChecksum = %v", i, err)
		}
	}
}

// TestOversizeFrameIsSkipped: a frame over the limit returns
// ErrFrameTooLarge with its command (so the broker can answer a SEND_ERROR
// for that sequence id), and the frame after it decodes normally.
func TestOversizeFrameIsSkipped(t *testing.T) {
	const limit = 1024
	big := mustAppendPayload(t, nil, sendCmd(5, 42), nil, mustMessage(t, testMeta(42), make([]byte, 4*limit)))
	var stream []byte
	stream = mustAppend(t, stream, Ping())
	stream = append(stream, big...)
	stream = mustAppend(t, stream, Pong())

	d := NewDecoder(iotest.OneByteReader(bytes.NewReader(stream)), limit)
	if f, err := d.Next(); err != nil || f.Cmd.GetType() != pb.BaseCommand_PING {
		t.Fatalf("first frame: %v %v", f.Cmd, err)
	}
	f, err := d.Next()
	if !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("oversize frame: err %v, want ErrFrameTooLarge", err)
	}
	if f.Cmd.GetSend().GetProducerId() != 5 || f.Cmd.GetSend().GetSequenceId() != 42 || f.Payload != nil {
		t.Fatalf("oversize frame: got %v, payload %d bytes; want the SEND command only", f.Cmd, len(f.Payload))
	}
	if f, err := d.Next(); err != nil || f.Cmd.GetType() != pb.BaseCommand_PONG {
		t.Fatalf("frame after the oversize one: %v %v", f.Cmd, err)
	}
	if _, err := d.Next(); err != io.EOF {
		t.Fatalf("end: %v", err)
	}

	// A stream that ends inside the oversize frame reports both.
	d = NewDecoder(bytes.NewReader(big[:2*limit]), limit)
	if _, err := d.Next(); !errors.Is(err, ErrFrameTooLarge) || !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("truncated oversize frame: %v", err)
	}
}

// failReader fails every read with errBodyRead: behind a frame's
// totalSize, a read from it means the Decoder read into the body.
var errBodyRead = errors.New("test: the Decoder read the body")

type failReader struct{}

func (failReader) Read([]byte) (int, error) { return 0, errBodyRead }

// TestOversizeFrameIsRefusedUnread (issue 30, item 1): with
// RefuseOversize, a frame whose totalSize exceeds the limit is
// ErrFrameRefused as soon as its totalSize is read; the Decoder reads
// nothing after it. Under the limit, frames decode as before; raising the
// limit (CONNECTED) admits the larger frame.
func TestOversizeFrameIsRefusedUnread(t *testing.T) {
	const limit = 1024
	big := mustAppendPayload(t, nil, sendCmd(5, 42), nil, mustMessage(t, testMeta(42), make([]byte, 4*limit)))
	d := NewDecoder(io.MultiReader(bytes.NewReader(big[:4]), failReader{}), 0)
	d.SetLimit(limit, RefuseOversize)
	if _, err := d.Next(); !errors.Is(err, ErrFrameRefused) || errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("oversize frame: err %v, want ErrFrameRefused (and not ErrFrameTooLarge, which means skipped)", err)
	}

	stream := mustAppend(t, nil, Ping())
	stream = append(stream, big...)
	d = NewDecoder(bytes.NewReader(stream), 0)
	d.SetLimit(limit, RefuseOversize)
	if f, err := d.Next(); err != nil || f.Cmd.GetType() != pb.BaseCommand_PING {
		t.Fatalf("frame under the limit: %v %v", f.Cmd, err)
	}
	d.SetLimit(0, SkipOversize) // DefaultMaxFrameSize
	if f, err := d.Next(); err != nil || f.Cmd.GetSend().GetSequenceId() != 42 {
		t.Fatalf("frame after the limit was raised: %v %v", f.Cmd, err)
	}
}

// countingBudget records what Decoders acquire and release.
type countingBudget struct {
	held, most int
	acquired   []int
	fail       error
}

func (b *countingBudget) Acquire(n int) error {
	if b.fail != nil {
		return b.fail
	}
	b.acquired = append(b.acquired, n)
	b.held += n
	b.most = max(b.most, b.held)
	return nil
}

func (b *countingBudget) Release(n int) { b.held -= n }

// TestBudgetCoversEveryFrameRead (issue 30, item 1): each frame read,
// skipped oversize frames' commands included, is acquired from the Budget
// at its size before it is read and released once read, also when the
// stream ends inside it; an Acquire error ends Next with that error, not
// ErrFrameTooLarge (the stream is inside the frame).
func TestBudgetCoversEveryFrameRead(t *testing.T) {
	const limit = 1024
	big := mustAppendPayload(t, nil, sendCmd(5, 42), nil, mustMessage(t, testMeta(42), make([]byte, 4*limit)))
	small := mustAppendPayload(t, nil, sendCmd(5, 43), nil, mustMessage(t, testMeta(43), []byte("x")))
	stream := mustAppend(t, nil, Ping())
	stream = append(stream, big...)
	stream = append(stream, small...)
	b := &countingBudget{}
	d := NewDecoder(bytes.NewReader(stream), limit)
	d.SetBudget(b)
	if _, err := d.Next(); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Next(); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("oversize frame: %v", err)
	}
	if _, err := d.Next(); err != nil {
		t.Fatal(err)
	}
	cmdSize := int(binary.BigEndian.Uint32(big[4:]))
	want := []int{len(stream[:len(stream)-len(big)-len(small)]) - 4, cmdSize, len(small) - 4}
	if len(b.acquired) != 3 || b.acquired[0] != want[0] || b.acquired[1] != want[1] || b.acquired[2] != want[2] {
		t.Fatalf("acquired %v, want %v (each frame's totalSize; the skipped one's command size)", b.acquired, want)
	}
	if b.held != 0 || b.most != max(want[0], want[1], want[2]) {
		t.Fatalf("held %d after the frames (want 0), at most %d (want one frame's)", b.held, b.most)
	}

	// Cut inside a frame: released all the same.
	d = NewDecoder(bytes.NewReader(small[:len(small)-1]), limit)
	d.SetBudget(b)
	if _, err := d.Next(); err != io.ErrUnexpectedEOF || b.held != 0 {
		t.Fatalf("truncated frame: err %v, held %d", err, b.held)
	}

	errClosed := errors.New("test: connection closed")
	for name, s := range map[string][]byte{"frame": small, "skipped frame's command": big} {
		d = NewDecoder(bytes.NewReader(s), limit)
		d.SetBudget(&countingBudget{fail: errClosed})
		if _, err := d.Next(); err != errClosed {
			t.Fatalf("%s: Acquire failing: err %v, want its error as is", name, err)
		}
	}
}

// TestOversizeLengthAllocatesNothing: a 4 GiB totalSize is refused from
// the length field, before any allocation of that size.
func TestOversizeLengthAllocatesNothing(t *testing.T) {
	stream := []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xf0}
	allocs := testing.AllocsPerRun(10, func() {
		d := NewDecoder(bytes.NewReader(stream), 1024)
		if _, err := d.Next(); !errors.Is(err, ErrFrameTooLarge) {
			t.Fatalf("err %v", err)
		}
	})
	if allocs > 20 {
		t.Fatalf("%v allocations", allocs)
	}
}

// TestTruncatedInput: a stream cut anywhere inside a frame is
// io.ErrUnexpectedEOF from the Decoder and ErrMalformed from ParseFrame.
func TestTruncatedInput(t *testing.T) {
	frame := mustAppendPayload(t, nil, sendCmd(1, 2), nil, mustMessage(t, testMeta(2), []byte("abc")))
	for n := 1; n < len(frame); n++ {
		if _, err := NewDecoder(bytes.NewReader(frame[:n]), 0).Next(); err != io.ErrUnexpectedEOF {
			t.Fatalf("cut at %d: Decoder: %v, want io.ErrUnexpectedEOF", n, err)
		}
		if _, err := ParseFrame(frame[:n]); !errors.Is(err, ErrMalformed) {
			t.Fatalf("cut at %d: ParseFrame: %v, want ErrMalformed", n, err)
		}
	}
}

// rawFrame frames hand-built BaseCommand bytes.
func rawFrame(cmd []byte, payload []byte) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(4+len(cmd)+len(payload)))
	b = binary.BigEndian.AppendUint32(b, uint32(len(cmd)))
	b = append(b, cmd...)
	return append(b, payload...)
}

// rawCmd builds BaseCommand bytes: field 1 = typ, and a body message in
// field typ (if body is non-nil).
func rawCmd(typ uint64, body []byte) []byte {
	b := protowire.AppendTag(nil, 1, protowire.VarintType)
	b = protowire.AppendVarint(b, typ)
	if body != nil {
		b = protowire.AppendTag(b, protowire.Number(typ), protowire.BytesType)
		b = protowire.AppendBytes(b, body)
	}
	return b
}

// TestInvalidCommandsAreErrors: commands that break the schema are
// errors, never panics: a missing required field (CommandSend without
// producer_id), a type without its body, payload bytes on a simple command,
// a SEND without a message part, and bad size fields.
func TestInvalidCommandsAreErrors(t *testing.T) {
	seqOnly := protowire.AppendVarint(protowire.AppendTag(nil, 2, protowire.VarintType), 1)
	msg := mustMessage(t, testMeta(1), nil)
	cases := map[string][]byte{
		"send without producer_id": rawFrame(rawCmd(6, seqOnly), msg),
		"send without body":        rawFrame(rawCmd(6, nil), msg),
		"success without body":     rawFrame(rawCmd(13, nil), nil),
		"no type":                  rawFrame(protowire.AppendVarint(protowire.AppendTag(nil, 18, protowire.BytesType), 0), nil),
		"garbage protobuf":         rawFrame([]byte{0xff, 0xff, 0xff}, nil),
		"ping with payload":        rawFrame(rawCmd(18, []byte{}), msg),
		"send without payload":     mustAppendPayload(t, nil, sendCmd(1, 1), nil, msg)[:8+proto.Size(sendCmd(1, 1))],
		"cmdSize past the end":     {0, 0, 0, 8, 0, 0, 0, 9, 8, 18, 0, 0},
		"totalSize below 4":        {0, 0, 0, 2, 0, 0},
	}
	// Fix up "send without payload": its totalSize must match what is left.
	b := cases["send without payload"]
	binary.BigEndian.PutUint32(b, uint32(len(b)-4))
	// "send without magic": a SEND whose payload lacks 0x0e01.
	sendBytes, _ := proto.Marshal(sendCmd(1, 1))
	cases["send without magic"] = rawFrame(sendBytes, []byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10})
	cases["broker meta too long"] = rawFrame(sendBytes, append([]byte{0x0e, 0x02, 0, 0, 1, 0}, msg...))

	for name, frame := range cases {
		if _, err := ParseFrame(frame); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: ParseFrame = %v, want ErrMalformed", name, err)
		}
		if _, err := NewDecoder(bytes.NewReader(frame), 0).Next(); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: Decoder = %v, want ErrMalformed", name, err)
		}
	}
}

// TestUnknownCommandType: a type number outside BaseCommand.Type is
// ErrUnknownCommand, and the Decoder carries on with the next frame.
func TestUnknownCommandType(t *testing.T) {
	stream := rawFrame(rawCmd(99, []byte{}), nil)
	stream = mustAppend(t, stream, Ping())
	d := NewDecoder(bytes.NewReader(stream), 0)
	if _, err := d.Next(); !errors.Is(err, ErrUnknownCommand) {
		t.Fatalf("type 99: %v, want ErrUnknownCommand", err)
	}
	if f, err := d.Next(); err != nil || f.Cmd.GetType() != pb.BaseCommand_PING {
		t.Fatalf("after type 99: %v %v", f.Cmd, err)
	}
	// A known type without a declared body (transactions) decodes, its
	// body kept as unknown bytes for the broker to refuse politely.
	newTxn := protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), 77)
	f, err := ParseFrame(rawFrame(rawCmd(50, newTxn), nil))
	if err != nil || f.Cmd.GetType() != pb.BaseCommand_NEW_TXN {
		t.Fatalf("NEW_TXN: %v %v", f.Cmd, err)
	}
}

// TestEncodeRefusesInvalidCommands: the encoder checks what the decoder
// checks, and leaves dst as it was on error.
func TestEncodeRefusesInvalidCommands(t *testing.T) {
	dst := []byte("prefix")
	msg := mustMessage(t, testMeta(0), nil)
	for name, f := range map[string]func() ([]byte, error){
		"missing required": func() ([]byte, error) {
			return AppendCommand(dst, &pb.BaseCommand{Type: pb.BaseCommand_SUCCESS.Enum(), Success: &pb.CommandSuccess{}})
		},
		"missing body": func() ([]byte, error) {
			return AppendCommand(dst, &pb.BaseCommand{Type: pb.BaseCommand_SUCCESS.Enum()})
		},
		"no type":               func() ([]byte, error) { return AppendCommand(dst, &pb.BaseCommand{}) },
		"send as simple":        func() ([]byte, error) { return AppendCommand(dst, sendCmd(1, 1)) },
		"ping with payload":     func() ([]byte, error) { return AppendPayloadCommand(dst, Ping(), nil, msg) },
		"payload without magic": func() ([]byte, error) { return AppendPayloadCommand(dst, sendCmd(1, 1), nil, []byte("hello world")) },
		"send missing required": func() ([]byte, error) {
			return AppendPayloadCommand(dst, &pb.BaseCommand{Type: pb.BaseCommand_SEND.Enum(), Send: &pb.CommandSend{}}, nil, msg)
		},
	} {
		out, err := f()
		if err == nil {
			t.Errorf("%s: no error", name)
		}
		if string(out) != "prefix" {
			t.Errorf("%s: dst became %q", name, out)
		}
	}
	if _, err := EncodeMessage(&pb.MessageMetadata{ProducerName: proto.String("p")}, nil); err == nil {
		t.Error("EncodeMessage without sequence_id and publish_time: no error")
	}
}

// TestBatchRoundTrip: AppendBatchEntry records split back with ParseBatch;
// a count beyond the records, or a record cut short, is ErrMalformed.
func TestBatchRoundTrip(t *testing.T) {
	var batch []byte
	var err error
	payloads := []string{"a", "", "ccc"}
	for i, p := range payloads {
		smm := &pb.SingleMessageMetadata{SequenceId: proto.Uint64(uint64(i)), PartitionKey: proto.String("k")}
		if batch, err = AppendBatchEntry(batch, smm, []byte(p)); err != nil {
			t.Fatal(err)
		}
	}
	msgs, err := ParseBatch(batch, len(payloads))
	if err != nil {
		t.Fatal(err)
	}
	for i, m := range msgs {
		if string(m.Payload) != payloads[i] || m.Meta.GetSequenceId() != uint64(i) || m.Meta.GetPayloadSize() != int32(len(payloads[i])) {
			t.Fatalf("message %d: %v %q", i, m.Meta, m.Payload)
		}
	}
	for _, n := range []int{0, -1, 4, math.MaxInt} {
		if _, err := ParseBatch(batch, n); !errors.Is(err, ErrMalformed) {
			t.Errorf("n=%d: %v, want ErrMalformed", n, err)
		}
	}
	// Fewer than all: the first n, as the client reads them.
	if first, err := ParseBatch(batch, 1); err != nil || len(first) != 1 || string(first[0].Payload) != "a" {
		t.Errorf("ParseBatch(batch, 1) = %v, %v", first, err)
	}
	// A record cut short is malformed.
	if _, err := ParseBatch(batch[:len(batch)-1], 3); !errors.Is(err, ErrMalformed) {
		t.Errorf("truncated batch: %v", err)
	}
	// A batch survives the full path: metadata marks it, ParseMessage
	// returns it, ParseBatch splits it.
	meta := testMeta(0)
	meta.NumMessagesInBatch = proto.Int32(int32(len(payloads)))
	_, got, err := ParseMessage(mustMessage(t, meta, batch))
	if err != nil || !bytes.Equal(got, batch) {
		t.Fatalf("batch through ParseMessage: %v", err)
	}
}

func crc32c(b []byte) uint32 {
	// Computed bit by bit, independent of hash/crc32, as a cross-check.
	crc := ^uint32(0)
	for _, c := range b {
		crc ^= uint32(c)
		for k := 0; k < 8; k++ {
			if crc&1 != 0 {
				crc = crc>>1 ^ 0x82f63b78
			} else {
				crc >>= 1
			}
		}
	}
	return ^crc
}

// TestPayloadRoom: a payload frame read by a Decoder offers the bytes in
// front of its Payload, and overwriting them changes neither the decoded
// command nor the payload; a ParseFrame frame offers none (its memory is
// the caller's).
func TestPayloadRoom(t *testing.T) {
	msg := mustMessage(t, testMeta(0), bytes.Repeat([]byte("p"), 3000))
	cmd := sendCmd(7, 9)
	frame := mustAppendPayload(t, nil, cmd, nil, msg)

	f, err := NewDecoder(iotest.HalfReader(bytes.NewReader(frame)), 0).Next()
	if err != nil {
		t.Fatal(err)
	}
	buf, off := f.PayloadRoom()
	cmdSize := binary.BigEndian.Uint32(frame[4:8])
	if want := readHeadroom + 4 + int(cmdSize); off != want {
		t.Fatalf("room %d bytes, want %d (headroom, cmdSize, command)", off, want)
	}
	if len(buf[off:]) != len(f.Payload) || &buf[off] != &f.Payload[0] {
		t.Fatal("Payload is not buf[off:]")
	}
	for i := range buf[:off] {
		buf[i] = 0xff
	}
	if !proto.Equal(f.Cmd, cmd) {
		t.Fatalf("command changed with the room overwritten: %v, want %v", f.Cmd, cmd)
	}
	if !bytes.Equal(f.Payload, msg) {
		t.Fatal("payload changed with the room overwritten")
	}

	p, err := ParseFrame(frame)
	if err != nil {
		t.Fatal(err)
	}
	if buf, off := p.PayloadRoom(); off != 0 || &buf[0] != &p.Payload[0] {
		t.Fatalf("ParseFrame's frame offers %d bytes of room in the caller's memory", off)
	}
	s, err := NewDecoder(bytes.NewReader(mustAppend(t, nil, Success(1))), 0).Next()
	if err != nil {
		t.Fatal(err)
	}
	if buf, off := s.PayloadRoom(); buf != nil || off != 0 {
		t.Fatalf("a frame without payload offers room: %d bytes", off)
	}
}
