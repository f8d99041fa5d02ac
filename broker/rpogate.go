package broker

import (
	"fmt"

	"github.com/meridian-mq/meridian/broker/meta"
	"github.com/meridian-mq/meridian/broker/replication"
)

// The RPO budget's gate on a topic's producers (the decision is
// broker/replication/rpo.go's; this applies it):
//
//   - hold: sends wait unanswered in arrival order behind the gate that
//     a planned switchover's hold uses (Topic.gateSend, heldSends); new
//     producers are admitted. When the gate opens the held sends are
//     appended, in order, unless a switchover's hold holds them still
//     (its release then lets them go). The producer's pending-send bound
//     pushes back on the connection meanwhile; a send held past the
//     client's send timeout fails there with a timeout, retriable.
//   - refuse: the topic's producers are closed (CLOSE_PRODUCER) and new
//     ones refused with ProducerBlockedQuotaExceededException, on which
//     the Go client fails its pending sends
//     (ErrProducerBlockedQuotaExceeded) and keeps reconnecting; sends
//     already on the wire for a closed producer are dropped unanswered.
//     Refusing the producer rather than each send: a SEND_ERROR makes the
//     Go client close the whole connection, its consumers too.

// errRPORefused is the refusal of producers of a topic over its budget.
var errRPORefused = fmt.Errorf("%w: replication lag over the namespace's RPO budget (maxReplicationLagMs/maxReplicationLagBytes, action refuse)", meta.ErrQuotaException)

// setRPOGate applies g (replication.Log.SetRPOGate).
func (t *Topic) setRPOGate(g replication.RPOGate) {
	t.mu.Lock()
	wasHeld := t.rpoHeld
	t.rpoHeld = g == replication.RPOHold
	t.rpoErr = nil
	if g == replication.RPORefuse {
		t.rpoErr = errRPORefused
	}
	swHeld, _ := t.b.sw.holdOf(t.name.NamespaceName())
	t.mu.Unlock()
	if g == replication.RPORefuse {
		failoverTopic{t}.CloseProducers()
	}
	if wasHeld && !t.rpoHeld && !swHeld {
		t.releaseSends(false)
	}
	t.b.log.Warn("RPO budget: producers "+g.String(), "topic", t.name.String())
}
