package codec

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	pb "github.com/meridian-mq/meridian/proto/pulsarpb"
)

// TestKindTableIsComplete: every Kind has its own ServerError code, and
// only KindUnknown maps to UnknownError.
func TestKindTableIsComplete(t *testing.T) {
	seen := map[pb.ServerError]Kind{}
	for k := Kind(0); k < numKinds; k++ {
		code := k.Code()
		if code == pb.ServerError_UnknownError && k != KindUnknown {
			t.Errorf("kind %d has no code in the table", k)
		}
		if prev, dup := seen[code]; dup {
			t.Errorf("kinds %d and %d both map to %v", prev, k, code)
		}
		seen[code] = k
	}
	if Kind(200).Code() != pb.ServerError_UnknownError {
		t.Error("out-of-range kind must map to UnknownError")
	}
}

// TestFinalKindsMatchClientStrings: pulsar-client-go gives up on a
// producer or consumer by substring-matching the error text
// "server error: <CodeName>: <message>" against "TopicNotFound",
// "TopicTerminatedError" and "ProducerFenced"; the retryable-but-failing
// "ProducerBlockedQuotaExceededException" likewise. The table's codes must
// print as exactly those names, and no other code's name may contain them
// (or a retryable failure would become final).
func TestFinalKindsMatchClientStrings(t *testing.T) {
	matched := map[Kind]string{
		KindTopicNotFound:   "TopicNotFound",
		KindTopicTerminated: "TopicTerminatedError",
		KindProducerFenced:  "ProducerFenced",
		KindQuotaExceeded:   "ProducerBlockedQuotaExceededException",
	}
	for k := Kind(0); k < numKinds; k++ {
		text := fmt.Sprintf("server error: %s: %s", k.Code(), "some message")
		for mk, s := range matched {
			if got := strings.Contains(text, s); got != (k == mk) {
				t.Errorf("kind %v: client text %q matches %q = %v", k, text, s, got)
			}
		}
	}
}

func TestKindOf(t *testing.T) {
	base := errors.New("ledger fenced")
	err := fmt.Errorf("open topic: %w", WithKind(KindServiceNotReady, base))
	if KindOf(err) != KindServiceNotReady || CodeOf(err) != pb.ServerError_ServiceNotReady || !errors.Is(err, base) {
		t.Fatalf("KindOf(%v) = %v", err, KindOf(err))
	}
	if KindOf(base) != KindUnknown || WithKind(KindTopicNotFound, nil) != nil {
		t.Fatal("untagged error must be KindUnknown; WithKind(nil) must be nil")
	}
	e := Errorf(KindTopicNotFound, "topic %q: %w", "t", base)
	cmd := ErrorFor(9, e)
	if cmd.GetError().GetError() != pb.ServerError_TopicNotFound || cmd.GetError().GetMessage() != `topic "t": ledger fenced` || cmd.GetError().GetRequestId() != 9 {
		t.Fatalf("ErrorFor = %v", cmd)
	}
}
