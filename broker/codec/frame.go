package codec

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	pb "github.com/meridian-mq/meridian/proto/pulsarpb"
)

const (
	// DefaultMaxMessageSize is the client's default message limit (5 MiB),
	// used until CONNECTED announces another max_message_size.
	DefaultMaxMessageSize = 5 << 20
	// FramePadding is the room the client allows on top of the message
	// size for the command and headers (10 KiB): it rejects frames whose
	// totalSize exceeds max_message_size + FramePadding.
	FramePadding = 10 << 10
	// DefaultMaxFrameSize bounds totalSize for a broker announcing the
	// default message size: 5 MiB + 10 KiB = 5,253,120 bytes.
	DefaultMaxFrameSize = DefaultMaxMessageSize + FramePadding

	// MagicCRC32C starts the checksummed message part of a payload command.
	MagicCRC32C uint16 = 0x0e01
	// MagicBrokerEntryMetadata starts the optional broker-entry metadata,
	// which precedes MagicCRC32C.
	MagicBrokerEntryMetadata uint16 = 0x0e02

	// messageHeaderSize is magic + checksum + metadata size.
	messageHeaderSize = 2 + 4 + 4
	// readBufferSize is the Decoder's read-ahead buffer.
	readBufferSize = 32 << 10
	// readGrowStep is the most the Decoder allocates for a frame before its
	// bytes arrive (see Decoder.read). A batch of the Go client's default
	// BatchingMaxSize (128 KiB) fits, so it is read without regrowing the
	// slice (at 64 KiB, regrowing was 8 % of the standalone's allocation at
	// 50,000 msgs/s).
	readGrowStep = 256 << 10
	// readHeadroom: the Decoder reads each frame this many bytes into its
	// allocation, so that a broker can put a header of its own in front of
	// a payload without copying the payload (Frame.PayloadRoom).
	readHeadroom = 64
)

var (
	// ErrFrameTooLarge: a frame's totalSize exceeds the Decoder's limit. The
	// Decoder has skipped the frame; the connection may continue.
	ErrFrameTooLarge = errors.New("codec: frame too large")
	// ErrFrameRefused: a frame's totalSize exceeds the limit of a Decoder
	// set to RefuseOversize. Only the totalSize was read, none of the
	// body: the stream is inside the frame, so close the connection.
	ErrFrameRefused = errors.New("codec: frame refused: larger than the limit")
	// ErrMalformed: bytes that are not a valid frame, command or message
	// (bad sizes, undecodable protobuf, a required field missing, a body
	// that does not match the command type). Close the connection.
	ErrMalformed = errors.New("codec: malformed frame")
	// ErrBadChecksum: the CRC32C of a message part does not match its bytes.
	ErrBadChecksum = errors.New("codec: checksum mismatch")
	// ErrUnknownCommand: a BaseCommand whose type number this protocol
	// version does not define. The frame was consumed whole.
	ErrUnknownCommand = errors.New("codec: unknown command type")
)

// Frame is one decoded frame. The caller owns it and its slices; the
// Decoder never reuses them.
type Frame struct {
	// Cmd is the command; its Type is set and the body field matching the
	// type is present (except for PING and PONG, whose bodies are empty,
	// and types whose bodies pulsarpb does not declare).
	Cmd *pb.BaseCommand
	// Payload is set for payload commands (SEND, MESSAGE) and nil for all
	// others: the bytes from the 0x0e01 magic to the end of the frame
	// (magic, checksum, metadata size, metadata, payload), verbatim, so a
	// broker can store them and send them back byte-identical. Its header
	// sizes have been checked but not its checksum: see VerifyChecksum.
	Payload []byte
	// BrokerEntryMetadata is the 0x0e02 section of a payload command, or
	// nil if the frame has none.
	BrokerEntryMetadata *pb.BrokerEntryMetadata

	// room is, for a payload frame read by a Decoder, its allocation:
	// Payload is its tail (see PayloadRoom).
	room []byte
}

// PayloadRoom returns, for a payload frame read by a Decoder, the frame's
// buffer and Payload's offset in it (Payload is buf[off:]). The bytes
// before off held the frame's sizes and command, already decoded into Cmd
// (which shares no memory with them), and some headroom: the caller may
// overwrite them, to prepend a header to Payload without copying it. For
// other frames (ParseFrame's alias the caller's memory) it returns
// Payload and 0.
func (f *Frame) PayloadRoom() (buf []byte, off int) {
	if f.room == nil {
		return f.Payload, 0
	}
	return f.room, len(f.room) - len(f.Payload)
}

// hasPayload reports whether frames of type t carry a message part.
func hasPayload(t pb.BaseCommand_Type) bool {
	return t == pb.BaseCommand_SEND || t == pb.BaseCommand_MESSAGE
}

// Decoder reads frames from a byte stream. It is not safe for concurrent
// use; one connection's read loop owns it.
type Decoder struct {
	r      *bufio.Reader
	max    uint32
	over   Oversize
	budget Budget
	hdr    [4]byte
}

// Oversize is what a Decoder does with a frame whose totalSize exceeds
// its limit.
type Oversize int

const (
	// SkipOversize reads past the frame, decoding its command when the
	// command alone fits, and returns ErrFrameTooLarge: the stream stays
	// usable. For a connection whose peer is known (after CONNECTED), so
	// one oversized message does not end the producer's other work.
	SkipOversize Oversize = iota
	// RefuseOversize reads none of the frame's body and returns
	// ErrFrameRefused. For a peer not yet known (before CONNECTED): it is
	// not worth the bytes.
	RefuseOversize
)

// Budget bounds the memory of the frames being read by the Decoders that
// share it (a broker's connections). A Decoder calls Acquire with a
// frame's totalSize (for a frame being skipped, its command's size) before
// it allocates for the frame, and Release with the same n once the bytes
// are read, into a Frame or discarded, or the read failed. The memory the
// Frame keeps after Next returns is no longer the Budget's. Acquire may
// block until n is available; an error from it ends Next with that error.
// Implementations must be safe for concurrent use.
type Budget interface {
	Acquire(n int) error
	Release(n int)
}

// NewDecoder returns a Decoder reading from r that skips frames whose
// totalSize exceeds maxFrameSize bytes (0 or less means
// DefaultMaxFrameSize; see SetLimit). Whatever the length fields claim, it allocates for
// a frame no more than maxFrameSize bytes, and no more than 256 KiB beyond
// twice the bytes that actually arrived.
func NewDecoder(r io.Reader, maxFrameSize int) *Decoder {
	d := &Decoder{r: bufio.NewReaderSize(r, readBufferSize)}
	d.SetLimit(maxFrameSize, SkipOversize)
	return d
}

// SetLimit sets the largest totalSize the frames Next reads from now on
// may have (0 or less means DefaultMaxFrameSize), and what Next does with
// a larger one. A broker starts a connection with a small limit it
// refuses past, and raises it once the peer has CONNECTED.
func (d *Decoder) SetLimit(maxFrameSize int, over Oversize) {
	if maxFrameSize <= 0 {
		maxFrameSize = DefaultMaxFrameSize
	}
	if maxFrameSize > math.MaxUint32 {
		maxFrameSize = math.MaxUint32
	}
	d.max, d.over = uint32(maxFrameSize), over
}

// SetBudget makes every frame Next reads from now on draw on b (nil: no
// budget).
func (d *Decoder) SetBudget(b Budget) { d.budget = b }

// Next reads and decodes the next frame.
//
// Errors: io.EOF when the stream ends cleanly between frames;
// io.ErrUnexpectedEOF when it ends inside one; ErrFrameTooLarge (the frame
// has been skipped, and Frame.Cmd is its command if that could be decoded;
// the error also wraps the read error if the stream ended while skipping);
// ErrFrameRefused (RefuseOversize: the frame's body is unread);
// ErrUnknownCommand (the frame has been consumed); ErrMalformed; the
// Budget's error; or the underlying reader's error. After any error but
// ErrFrameTooLarge and ErrUnknownCommand the caller should close the
// connection.
func (d *Decoder) Next() (Frame, error) {
	if _, err := io.ReadFull(d.r, d.hdr[:]); err != nil {
		return Frame{}, err // io.EOF only when no byte of the frame was read
	}
	size := binary.BigEndian.Uint32(d.hdr[:])
	if size > d.max {
		if d.over == RefuseOversize {
			return Frame{}, fmt.Errorf("%w: totalSize %d, limit %d", ErrFrameRefused, size, d.max)
		}
		return d.skip(size)
	}
	if size < 4 {
		return Frame{}, fmt.Errorf("%w: totalSize %d is smaller than the command size field", ErrMalformed, size)
	}
	if err := d.acquire(int(size)); err != nil {
		return Frame{}, err
	}
	buf, err := d.read(int(size))
	d.release(int(size))
	if err != nil {
		return Frame{}, noEOF(err)
	}
	f, err := parseBody(buf[readHeadroom:])
	if err == nil && f.Payload != nil {
		f.room = buf // Payload runs to the end of the frame
	}
	return f, err
}

// read returns the next n bytes (n <= d.max) in a new slice, after
// readHeadroom bytes of zeros. The slice grows as bytes arrive rather than
// being sized from the length field up front, so a peer that announces a
// large frame and stalls costs the broker at most readGrowStep bytes plus
// twice what it actually sent, not maxFrameSize.
func (d *Decoder) read(n int) ([]byte, error) {
	n += readHeadroom
	buf := make([]byte, readHeadroom, min(n, readGrowStep+readHeadroom))
	for len(buf) < n {
		if len(buf) == cap(buf) {
			buf = slices.Grow(buf, min(n-len(buf), cap(buf))) // doubles
		}
		end := min(cap(buf), n)
		m, err := io.ReadFull(d.r, buf[len(buf):end])
		buf = buf[:len(buf)+m]
		if err != nil {
			return nil, err
		}
	}
	return buf, nil
}

// skip consumes an oversized frame of size bytes, decoding its command
// first when the command alone fits within the limit.
func (d *Decoder) skip(size uint32) (Frame, error) {
	var f Frame
	tooLarge := fmt.Errorf("%w: totalSize %d, limit %d", ErrFrameTooLarge, size, d.max)
	remaining := int64(size)
	if _, err := io.ReadFull(d.r, d.hdr[:]); err != nil {
		return f, fmt.Errorf("%w: %w", tooLarge, noEOF(err))
	}
	remaining -= 4
	if cmdSize := binary.BigEndian.Uint32(d.hdr[:]); int64(cmdSize) <= remaining && cmdSize <= d.max {
		if err := d.acquire(int(cmdSize)); err != nil {
			return f, err // not ErrFrameTooLarge: the stream is inside the frame
		}
		b, err := d.read(int(cmdSize))
		d.release(int(cmdSize))
		if err != nil {
			return f, fmt.Errorf("%w: %w", tooLarge, noEOF(err))
		}
		remaining -= int64(cmdSize)
		if cmd, err := decodeCommand(b[readHeadroom:]); err == nil {
			f.Cmd = cmd
		}
	}
	for remaining > 0 {
		n := int(min(remaining, math.MaxInt32))
		m, err := d.r.Discard(n)
		remaining -= int64(m)
		if err != nil {
			return f, fmt.Errorf("%w: %w", tooLarge, noEOF(err))
		}
	}
	return f, tooLarge
}

func (d *Decoder) acquire(n int) error {
	if d.budget == nil {
		return nil
	}
	return d.budget.Acquire(n)
}

func (d *Decoder) release(n int) {
	if d.budget != nil {
		d.budget.Release(n)
	}
}

// noEOF turns io.EOF inside a frame into io.ErrUnexpectedEOF.
func noEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// ParseFrame decodes one complete frame as it is on the wire, totalSize
// prefix included (the output of AppendCommand or AppendPayloadCommand).
// totalSize must equal len(buf)-4. The returned Frame's Payload aliases
// buf. ParseFrame does not apply a size limit: buf is already in memory.
func ParseFrame(buf []byte) (Frame, error) {
	if len(buf) < 4 {
		return Frame{}, fmt.Errorf("%w: %d bytes, no totalSize", ErrMalformed, len(buf))
	}
	if size := binary.BigEndian.Uint32(buf); uint64(size) != uint64(len(buf)-4) {
		return Frame{}, fmt.Errorf("%w: totalSize %d, but %d bytes follow it", ErrMalformed, size, len(buf)-4)
	}
	return parseBody(buf[4:])
}

// parseBody decodes the bytes after totalSize. Payload aliases body.
func parseBody(body []byte) (Frame, error) {
	if len(body) < 4 {
		return Frame{}, fmt.Errorf("%w: totalSize %d is smaller than the command size field", ErrMalformed, len(body))
	}
	cmdSize := binary.BigEndian.Uint32(body)
	rest := body[4:]
	if uint64(cmdSize) > uint64(len(rest)) {
		return Frame{}, fmt.Errorf("%w: cmdSize %d exceeds the %d bytes left in the frame", ErrMalformed, cmdSize, len(rest))
	}
	cmd, err := decodeCommand(rest[:cmdSize])
	if err != nil {
		return Frame{}, err
	}
	rest = rest[cmdSize:]
	f := Frame{Cmd: cmd}
	if !hasPayload(cmd.GetType()) {
		if len(rest) != 0 {
			return Frame{}, fmt.Errorf("%w: %s carries %d unexpected payload bytes", ErrMalformed, cmd.GetType(), len(rest))
		}
		return f, nil
	}
	if len(rest) >= 2 && binary.BigEndian.Uint16(rest) == MagicBrokerEntryMetadata {
		if len(rest) < 6 {
			return Frame{}, fmt.Errorf("%w: truncated broker-entry metadata header", ErrMalformed)
		}
		n := binary.BigEndian.Uint32(rest[2:])
		if uint64(n) > uint64(len(rest)-6) {
			return Frame{}, fmt.Errorf("%w: broker-entry metadata size %d exceeds the %d bytes left", ErrMalformed, n, len(rest)-6)
		}
		bem := &pb.BrokerEntryMetadata{}
		if err := proto.Unmarshal(rest[6:6+n], bem); err != nil {
			return Frame{}, fmt.Errorf("%w: broker-entry metadata: %v", ErrMalformed, err)
		}
		f.BrokerEntryMetadata = bem
		rest = rest[6+n:]
	}
	if err := checkMessageHeader(rest); err != nil {
		return Frame{}, fmt.Errorf("%s payload: %w", cmd.GetType(), err)
	}
	f.Payload = rest
	return f, nil
}

// decodeCommand unmarshals a BaseCommand and checks it: a known type, all
// required fields, and the body the type names.
func decodeCommand(b []byte) (*pb.BaseCommand, error) {
	cmd := &pb.BaseCommand{}
	if err := (proto.UnmarshalOptions{AllowPartial: true}).Unmarshal(b, cmd); err != nil {
		return nil, fmt.Errorf("%w: command: %v", ErrMalformed, err)
	}
	if cmd.Type == nil {
		return nil, fmt.Errorf("%w: command has no type", ErrMalformed)
	}
	// protobuf-go keeps enum numbers it does not know (it treats proto2's
	// closed enums as open), so an undefined type arrives set.
	if cmd.GetType().Descriptor().Values().ByNumber(protoreflect.EnumNumber(cmd.GetType())) == nil {
		return nil, fmt.Errorf("%w: %d", ErrUnknownCommand, int32(cmd.GetType()))
	}
	if err := proto.CheckInitialized(cmd); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrMalformed, cmd.GetType(), err)
	}
	if err := checkBody(cmd); err != nil {
		return nil, err
	}
	return cmd, nil
}

// checkBody verifies that the body field named by cmd's type is set. Each
// body's field number equals its type number; types whose body pulsarpb
// does not declare, and the empty PING and PONG, are not checked.
func checkBody(cmd *pb.BaseCommand) error {
	t := cmd.GetType()
	if t == pb.BaseCommand_PING || t == pb.BaseCommand_PONG {
		return nil
	}
	m := cmd.ProtoReflect()
	fd := m.Descriptor().Fields().ByNumber(protoreflect.FieldNumber(t))
	if fd == nil || fd.Kind() != protoreflect.MessageKind {
		return nil
	}
	if !m.Has(fd) {
		return fmt.Errorf("%w: %s command without its %s body", ErrMalformed, t, fd.Name())
	}
	return nil
}

// checkMessageHeader checks the sizes of a message part: the magic, room
// for the checksum and metadata size, and a metadata size within bounds.
func checkMessageHeader(b []byte) error {
	if len(b) < messageHeaderSize {
		return fmt.Errorf("%w: message part of %d bytes is shorter than its %d-byte header", ErrMalformed, len(b), messageHeaderSize)
	}
	if m := binary.BigEndian.Uint16(b); m != MagicCRC32C {
		return fmt.Errorf("%w: message part starts with %#04x, not the %#04x magic", ErrMalformed, m, MagicCRC32C)
	}
	if n := binary.BigEndian.Uint32(b[6:]); uint64(n) > uint64(len(b)-messageHeaderSize) {
		return fmt.Errorf("%w: metadata size %d exceeds the %d bytes left", ErrMalformed, n, len(b)-messageHeaderSize)
	}
	return nil
}

// AppendCommand appends a simple (payload-less) frame for cmd to dst. It
// fails, returning dst unchanged, if cmd misses a required field or the
// body its type names, or is a SEND or MESSAGE (use AppendPayloadCommand).
func AppendCommand(dst []byte, cmd *pb.BaseCommand) ([]byte, error) {
	if hasPayload(cmd.GetType()) {
		return dst, fmt.Errorf("codec: %s needs a payload: use AppendPayloadCommand", cmd.GetType())
	}
	n, err := commandSize(cmd)
	if err != nil {
		return dst, err
	}
	if uint64(n)+4 > math.MaxUint32 {
		return dst, fmt.Errorf("codec: command of %d bytes does not fit a frame", n)
	}
	start := len(dst)
	dst = binary.BigEndian.AppendUint32(dst, uint32(4+n))
	dst = binary.BigEndian.AppendUint32(dst, uint32(n))
	dst, err = marshalSized(dst, cmd, n)
	if err != nil {
		return dst[:start], err
	}
	return dst, nil
}

// AppendPayloadCommand appends a SEND or MESSAGE frame to dst: cmd, the
// optional broker-entry metadata (only for clients that announced
// supports_broker_entry_metadata), then payload — the message part from
// the 0x0e01 magic on, verbatim, as stored (see Frame.Payload and
// AppendMessage). It fails, returning dst unchanged, on an invalid command
// or a payload without a well-formed message header.
func AppendPayloadCommand(dst []byte, cmd *pb.BaseCommand, brokerMeta *pb.BrokerEntryMetadata, payload []byte) ([]byte, error) {
	if !hasPayload(cmd.GetType()) {
		return dst, fmt.Errorf("codec: %s carries no payload: use AppendCommand", cmd.GetType())
	}
	if err := checkMessageHeader(payload); err != nil {
		return dst, fmt.Errorf("codec: payload: %w", err)
	}
	n, err := commandSize(cmd)
	if err != nil {
		return dst, err
	}
	total := 4 + uint64(n) + uint64(len(payload))
	bm := 0
	if brokerMeta != nil {
		bm = proto.Size(brokerMeta)
		total += 6 + uint64(bm)
	}
	if total > math.MaxUint32 {
		return dst, fmt.Errorf("codec: frame of %d bytes does not fit a 32-bit size", total)
	}
	start := len(dst)
	dst = binary.BigEndian.AppendUint32(dst, uint32(total))
	dst = binary.BigEndian.AppendUint32(dst, uint32(n))
	if dst, err = marshalSized(dst, cmd, n); err != nil {
		return dst[:start], err
	}
	if brokerMeta != nil {
		dst = binary.BigEndian.AppendUint16(dst, MagicBrokerEntryMetadata)
		dst = binary.BigEndian.AppendUint32(dst, uint32(bm))
		if dst, err = marshalSized(dst, brokerMeta, bm); err != nil {
			return dst[:start], err
		}
	}
	return append(dst, payload...), nil
}

// commandSize validates cmd for sending and returns its encoded size.
func commandSize(cmd *pb.BaseCommand) (int, error) {
	if cmd == nil || cmd.Type == nil {
		return 0, errors.New("codec: command without a type")
	}
	if err := checkBody(cmd); err != nil {
		return 0, fmt.Errorf("codec: cannot send: %w", err)
	}
	return proto.Size(cmd), nil
}

// marshalSized appends m, whose size was just computed as n (proto.Size
// caches it), checking required fields.
func marshalSized(dst []byte, m proto.Message, n int) ([]byte, error) {
	start := len(dst)
	dst, err := proto.MarshalOptions{UseCachedSize: true}.MarshalAppend(dst, m)
	if err != nil {
		return dst, fmt.Errorf("codec: marshal %s: %w", m.ProtoReflect().Descriptor().Name(), err)
	}
	if len(dst)-start != n {
		// Only if m changed between Size and Marshal: a data race.
		panic(fmt.Sprintf("codec: %s encoded to %d bytes, sized %d: modified concurrently?", m.ProtoReflect().Descriptor().Name(), len(dst)-start, n))
	}
	return dst, nil
}
