package replicator

import (
	"container/heap"
	"math/rand/v2"
	"time"
)

// simNet is a seeded, lossy network between regions in the manner of
// etcd raft's rafttest network.go: every message may be dropped,
// duplicated, and delayed by a random amount (so messages overtake each
// other); a link may be cut for a while. Nothing runs by itself: the
// simulation asks for the messages due at its current time.
type simNet struct {
	rng      *rand.Rand
	dropRate float64
	dupRate  float64
	delayMin time.Duration
	delayMax time.Duration
	// cut[from→to]: messages on the link are dropped until then.
	cut map[[2]string]time.Time
	// dropIf, when set, drops the messages it returns true for (a test's
	// targeted loss).
	dropIf func(m *simMsg) bool

	queue msgHeap
	seq   int
	// counters
	sent, dropped, duplicated int
}

type simMsg struct {
	from, to string
	at       time.Time
	order    int
	batch    *Batch
	ack      *Ack
}

func newSimNet(rng *rand.Rand) *simNet {
	return &simNet{rng: rng, cut: map[[2]string]time.Time{}, delayMin: time.Millisecond, delayMax: time.Millisecond}
}

func (n *simNet) delay() time.Duration {
	d := n.delayMin
	if n.delayMax > n.delayMin {
		d += time.Duration(n.rng.Int64N(int64(n.delayMax - n.delayMin)))
	}
	return d
}

// send queues m (sent at now) unless the network loses it.
func (n *simNet) send(now time.Time, m simMsg) {
	n.sent++
	if until, ok := n.cut[[2]string{m.from, m.to}]; ok && now.Before(until) {
		n.dropped++
		return
	}
	if n.dropIf != nil && n.dropIf(&m) {
		n.dropped++
		return
	}
	if n.dropRate > 0 && n.rng.Float64() < n.dropRate {
		n.dropped++
		return
	}
	copies := 1
	if n.dupRate > 0 && n.rng.Float64() < n.dupRate {
		copies = 2
		n.duplicated++
	}
	for range copies {
		c := m
		c.at = now.Add(n.delay())
		c.order = n.seq
		n.seq++
		heap.Push(&n.queue, c)
	}
}

// due removes and returns the messages to deliver at now, in delivery
// order.
func (n *simNet) due(now time.Time) []simMsg {
	var out []simMsg
	for len(n.queue) > 0 && !n.queue[0].at.After(now) {
		out = append(out, heap.Pop(&n.queue).(simMsg))
	}
	return out
}

// msgHeap orders messages by delivery time, then by sending order.
type msgHeap []simMsg

func (h msgHeap) Len() int { return len(h) }
func (h msgHeap) Less(i, j int) bool {
	if c := h[i].at.Compare(h[j].at); c != 0 {
		return c < 0
	}
	return h[i].order < h[j].order
}
func (h msgHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *msgHeap) Push(x any)   { *h = append(*h, x.(simMsg)) }
func (h *msgHeap) Pop() any {
	old := *h
	m := old[len(old)-1]
	*h = old[:len(old)-1]
	return m
}

// cutLink drops every message from→to until until.
func (n *simNet) cutLink(from, to string, until time.Time) { n.cut[[2]string{from, to}] = until }
