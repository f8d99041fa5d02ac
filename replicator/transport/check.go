package transport

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/meridian-mq/meridian/proto/replpb"
)

// What a stream's server checks of each message after the handshake,
// before anything of it reaches the topic (CheckRequest). The peer is a
// broker of the source region (its certificate was checked), but what it
// sends is input: a malformed message ends the stream with
// InvalidArgument, never a panic, a write of a half-formed entry, or a
// cursor with a hostile name. (A batch's sequence numbers and origins are
// the applier's to check: replicator.ErrBadBatch.)

// Bounds of a SubscriptionUpdate: a subscription name is at most
// MaxSubscriptionNameBytes (the broker's own limit on a name,
// meta.ValidSubscription), an update names at most MaxAckedIDs
// individually acknowledged ids (a cursor persists at most 10,000 ack
// ranges by default).
const (
	MaxSubscriptionNameBytes = 1024
	MaxAckedIDs              = 10_000
)

// CheckRequest checks a request received on an open stream from region
// source: a Batch of that origin whose entries each carry their origin
// message id (non-negative ledger and entry, batch index >= -1), or a
// SubscriptionUpdate naming a valid subscription name and valid ids. An
// error is a gRPC InvalidArgument status naming what is wrong.
func CheckRequest(req *replpb.ReplicateRequest, source string) error {
	bad := func(format string, a ...any) error {
		return status.Errorf(codes.InvalidArgument, "replication: "+format, a...)
	}
	if su := req.GetSubscription(); su != nil {
		switch n := su.GetName(); {
		case n == "":
			return bad("a subscription update without a name")
		case len(n) > MaxSubscriptionNameBytes:
			return bad("a subscription name of %d bytes: at most %d", len(n), MaxSubscriptionNameBytes)
		case !utf8.ValidString(n):
			return bad("subscription name %q is not valid UTF-8", n)
		case strings.IndexFunc(n, unicode.IsControl) >= 0:
			return bad("subscription name %q has a control character", n)
		}
		if len(su.GetAcked()) > MaxAckedIDs {
			return bad("subscription %q: %d acknowledged ids: at most %d", su.GetName(), len(su.GetAcked()), MaxAckedIDs)
		}
		if err := checkID("subscription "+su.GetName()+" mark_delete", su.GetMarkDelete(), true); err != nil {
			return bad("%v", err)
		}
		for _, id := range su.GetAcked() {
			if err := checkID("subscription "+su.GetName()+" acked", id, false); err != nil {
				return bad("%v", err)
			}
		}
		return nil
	}
	b := req.GetBatch()
	if b == nil {
		return bad("expected a Batch or a SubscriptionUpdate")
	}
	if b.GetOrigin() != source {
		return bad("a batch of origin %s on the stream of %s", b.GetOrigin(), source)
	}
	for i, e := range b.GetEntries() {
		if e == nil {
			return bad("batch %d: entry %d is empty", b.GetId(), i)
		}
		if e.GetSkip() {
			continue
		}
		if e.GetOriginId() == nil {
			return bad("batch %d: entry seq %d has no origin message id", b.GetId(), e.GetOriginSeq())
		}
		if err := checkID(fmt.Sprintf("batch %d: entry seq %d", b.GetId(), e.GetOriginSeq()), e.GetOriginId(), false); err != nil {
			return bad("%v", err)
		}
	}
	return nil
}

// checkID checks a message id: ledger and entry >= 0 and batch >= -1
// (nil: allowed when optional). A mark-delete position may be (ledger,
// -1): before the ledger's first entry.
func checkID(what string, id *replpb.MessageId, markDelete bool) error {
	if id == nil {
		return nil
	}
	minEntry := int64(0)
	if markDelete {
		minEntry = -1
	}
	if id.GetLedger() < 0 || id.GetEntry() < minEntry || id.GetBatch() < -1 {
		return fmt.Errorf("%s: message id %d:%d:%d out of range", what, id.GetLedger(), id.GetEntry(), id.GetBatch())
	}
	return nil
}
