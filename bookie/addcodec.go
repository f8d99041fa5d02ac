package bookie

import (
	"errors"
	"fmt"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
)

// recvAdd is a received bookiepb.AddRequest whose payload aliases the gRPC
// receive buffer instead of a copy of it. The server's AddEntries stream
// receives into it (stream.RecvMsg) so that an add's bytes are copied once
// on their way to disk, into the entry log's frame: proto.Unmarshal would
// allocate and copy every payload (a third of the bookie's allocation under
// load was that copy). release gives the buffer back once the store is done
// with the payload.
type recvAdd struct {
	requestID uint64
	ledgerID  int64
	entryID   int64
	lac       int64
	payload   []byte
	digest    uint32
	recovery  bool

	buf mem.Buffer
}

// release returns the receive buffer to its pool; payload is invalid after.
func (r *recvAdd) release() {
	if r.buf != nil {
		r.buf.Free()
		r.buf = nil
	}
	r.payload = nil
}

// AddRequest field numbers (proto/bookiepb/bookie.proto).
const (
	addFieldRequestID protowire.Number = 1
	addFieldLedgerID  protowire.Number = 2
	addFieldEntryID   protowire.Number = 3
	addFieldLAC       protowire.Number = 4
	addFieldPayload   protowire.Number = 5
	addFieldDigest    protowire.Number = 6
	addFieldRecovery  protowire.Number = 7
)

var errAddWire = errors.New("bookie: malformed AddRequest")

// decode parses b (the wire form of an AddRequest) into r, as
// proto.Unmarshal would: the last occurrence of a field wins, a known field
// with another wire type and unknown fields are skipped. payload aliases b.
func (r *recvAdd) decode(b []byte) error {
	*r = recvAdd{buf: r.buf}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fmt.Errorf("%w: %v", errAddWire, protowire.ParseError(n))
		}
		if num > protowire.MaxValidNumber {
			return fmt.Errorf("%w: field number %d out of range", errAddWire, num)
		}
		b = b[n:]
		switch {
		case typ == protowire.VarintType && num >= addFieldRequestID && num <= addFieldRecovery && num != addFieldPayload:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return fmt.Errorf("%w: field %d: %v", errAddWire, num, protowire.ParseError(n))
			}
			b = b[n:]
			switch num {
			case addFieldRequestID:
				r.requestID = v
			case addFieldLedgerID:
				r.ledgerID = int64(v)
			case addFieldEntryID:
				r.entryID = int64(v)
			case addFieldLAC:
				r.lac = int64(v)
			case addFieldDigest:
				r.digest = uint32(v)
			case addFieldRecovery:
				r.recovery = protowire.DecodeBool(v)
			}
		case typ == protowire.BytesType && num == addFieldPayload:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return fmt.Errorf("%w: payload: %v", errAddWire, protowire.ParseError(n))
			}
			b = b[n:]
			r.payload = v
		default:
			n := protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return fmt.Errorf("%w: field %d: %v", errAddWire, num, protowire.ParseError(n))
			}
			b = b[n:]
		}
	}
	return nil
}

// serverCodec is the bookie server's gRPC codec: gRPC's proto codec for
// every message, except that a *recvAdd keeps a reference to the receive
// buffer and aliases its payload.
type serverCodec struct{ proto encoding.CodecV2 }

func newServerCodec() serverCodec {
	return serverCodec{proto: encoding.GetCodecV2(proto.Name)}
}

func (c serverCodec) Name() string { return proto.Name }

func (c serverCodec) Marshal(v any) (mem.BufferSlice, error) { return c.proto.Marshal(v) }

func (c serverCodec) Unmarshal(data mem.BufferSlice, v any) error {
	r, ok := v.(*recvAdd)
	if !ok {
		return c.proto.Unmarshal(data, v)
	}
	// One buffer is referenced, not copied; several (a message across
	// HTTP/2 frames) are copied into one from the pool.
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	r.buf = buf
	if err := r.decode(buf.ReadOnlyData()); err != nil {
		r.release()
		return err
	}
	return nil
}
