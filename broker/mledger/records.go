package mledger

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/meridian-mq/meridian/proto/mlpb"
	"google.golang.org/protobuf/proto"
)

// FormatVersion is the version of the records this code writes; it refuses
// to act on a record of a higher version.
const FormatVersion = 1

// Key layout, relative to the store's prefix (see the package doc).
const keyRoot = "/managed-ledgers/"

// EscapeName escapes a managed-ledger or cursor name into one etcd key
// segment: bytes other than ASCII letters, digits, '-', '_' and '.' become
// %XX (upper-case hex), so '/' never appears and distinct names never
// collide. "public/default/persistent/my-topic" →
// "public%2Fdefault%2Fpersistent%2Fmy-topic".
func EscapeName(name string) string {
	const hex = "0123456789ABCDEF"
	var sb strings.Builder
	for i := 0; i < len(name); i++ {
		b := name[i]
		switch {
		case 'a' <= b && b <= 'z', 'A' <= b && b <= 'Z', '0' <= b && b <= '9', b == '-', b == '_', b == '.':
			sb.WriteByte(b)
		default:
			sb.WriteByte('%')
			sb.WriteByte(hex[b>>4])
			sb.WriteByte(hex[b&15])
		}
	}
	return sb.String()
}

// UnescapeName inverts EscapeName.
func UnescapeName(s string) (string, error) {
	var sb strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			sb.WriteByte(s[i])
			continue
		}
		if i+2 >= len(s) {
			return "", fmt.Errorf("mledger: bad escape in %q", s)
		}
		b, err := strconv.ParseUint(s[i+1:i+3], 16, 8)
		if err != nil {
			return "", fmt.Errorf("mledger: bad escape in %q: %v", s, err)
		}
		sb.WriteByte(byte(b))
		i += 2
	}
	return sb.String(), nil
}

// mlDir is the directory of one managed ledger's keys (with trailing '/').
func mlDir(name string) string { return keyRoot + EscapeName(name) + "/" }

// infoKey is the key of the ManagedLedgerInfo record.
func infoKey(name string) string { return mlDir(name) + "info" }

// cursorsDir is the directory of the cursor records.
func cursorsDir(name string) string { return mlDir(name) + "cursors/" }

// cursorKey is the key of one CursorInfo record.
func cursorKey(name, cursor string) string { return cursorsDir(name) + EscapeName(cursor) }

func ms(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

func fromMs(v int64) time.Time {
	if v == 0 {
		return time.Time{}
	}
	return time.UnixMilli(v)
}

func posToProto(p Position) *mlpb.Position {
	return &mlpb.Position{LedgerId: p.Ledger, EntryId: p.Entry}
}

func posFromProto(p *mlpb.Position) Position {
	if p == nil {
		return Earliest
	}
	return Position{p.LedgerId, p.EntryId}
}

// infoRecord is the decoded ManagedLedgerInfo.
type infoRecord struct {
	state   mlpb.ManagedLedgerState
	epoch   uint64
	ledgers []LedgerInfo
}

func encodeInfo(r infoRecord) ([]byte, error) {
	m := &mlpb.ManagedLedgerInfo{FormatVersion: FormatVersion, State: r.state, OwnerEpoch: r.epoch}
	ls := r.ledgers
	for _, l := range ls {
		m.Ledgers = append(m.Ledgers, &mlpb.LedgerInfo{
			LedgerId: l.ID, Entries: l.Entries, SizeBytes: l.SizeBytes,
			CreatedMs: ms(l.CreatedAt), ClosedMs: ms(l.ClosedAt), Closed: l.Closed,
		})
	}
	return proto.Marshal(m)
}

func decodeInfo(key string, b []byte) (infoRecord, error) {
	m := &mlpb.ManagedLedgerInfo{}
	if err := proto.Unmarshal(b, m); err != nil {
		return infoRecord{}, fmt.Errorf("mledger: record %s: %w", key, err)
	}
	if m.FormatVersion > FormatVersion {
		return infoRecord{}, fmt.Errorf("mledger: record %s has format version %d, this build knows up to %d", key, m.FormatVersion, FormatVersion)
	}
	ls := make([]LedgerInfo, 0, len(m.Ledgers))
	for _, l := range m.Ledgers {
		ls = append(ls, LedgerInfo{
			ID: l.LedgerId, Entries: l.Entries, SizeBytes: l.SizeBytes,
			CreatedAt: fromMs(l.CreatedMs), ClosedAt: fromMs(l.ClosedMs), Closed: l.Closed,
		})
	}
	r := infoRecord{state: m.State, epoch: m.OwnerEpoch, ledgers: ls}
	return r, validateInfo(key, r)
}

// cursorRecord is a cursor's persisted state.
type cursorRecord struct {
	markDelete Position
	acked      []Range
	batches    []BatchAck // ascending
	props      map[string]int64
	dropped    int64
}

func encodeCursor(r cursorRecord, now time.Time) ([]byte, error) {
	m := &mlpb.CursorInfo{
		FormatVersion: FormatVersion,
		MarkDelete:    posToProto(r.markDelete),
		Properties:    r.props,
		DroppedRanges: r.dropped,
		UpdatedMs:     ms(now),
	}
	for _, a := range r.acked {
		m.Acked = append(m.Acked, &mlpb.AckRange{From: posToProto(a.From), To: posToProto(a.To)})
	}
	for _, b := range r.batches {
		m.BatchAcks = append(m.BatchAcks, &mlpb.BatchAck{Position: posToProto(b.Pos), Unacked: b.Unacked})
	}
	return proto.Marshal(m)
}

func decodeCursor(key string, b []byte) (cursorRecord, error) {
	m := &mlpb.CursorInfo{}
	if err := proto.Unmarshal(b, m); err != nil {
		return cursorRecord{}, fmt.Errorf("mledger: record %s: %w", key, err)
	}
	if m.FormatVersion > FormatVersion {
		return cursorRecord{}, fmt.Errorf("mledger: record %s has format version %d, this build knows up to %d", key, m.FormatVersion, FormatVersion)
	}
	r := cursorRecord{markDelete: posFromProto(m.MarkDelete), props: m.Properties, dropped: m.DroppedRanges}
	for _, a := range m.Acked {
		r.acked = append(r.acked, Range{posFromProto(a.From), posFromProto(a.To)})
	}
	for _, b := range m.BatchAcks {
		r.batches = append(r.batches, BatchAck{Pos: posFromProto(b.Position), Unacked: b.Unacked})
	}
	return r, validateCursor(key, r)
}
