package access

import (
	"errors"
	"slices"
	"testing"
)

func req(id ID, m Mode) Request { return Request{ID: id, Mode: m} }

func withEpoch(r Request, e uint64) Request {
	r.Epoch, r.HasEpoch = e, true
	return r
}

func mustGrant(t *testing.T, c *Core, r Request) Decision {
	t.Helper()
	d := c.Add(r)
	if d.Verdict != Granted {
		t.Fatalf("%v producer %d: %v %v, want granted", r.Mode, r.ID, d.Verdict, d.Err)
	}
	return d
}

func mustRefuse(t *testing.T, c *Core, r Request, want error) {
	t.Helper()
	d := c.Add(r)
	if d.Verdict != Refused || !errors.Is(d.Err, want) {
		t.Fatalf("%v producer %d: %v %v, want refused with %v", r.Mode, r.ID, d.Verdict, d.Err, want)
	}
}

// Exclusive: a second Exclusive is fenced, a Shared one is busy; an
// Exclusive is fenced while Shared producers are attached.
func TestExclusiveRefusesOthers(t *testing.T) {
	c := New(0, false)
	d := mustGrant(t, c, req(1, Exclusive))
	if d.Epoch != 0 || !d.HasEpoch || !d.Persist {
		t.Fatalf("first exclusive grant: %+v, want epoch 0 to persist", d)
	}
	mustRefuse(t, c, req(2, Exclusive), ErrFenced)
	mustRefuse(t, c, req(3, Shared), ErrBusy)
	c.Remove(1)
	mustGrant(t, c, req(4, Shared))
	mustRefuse(t, c, req(5, Exclusive), ErrFenced)
	c.Remove(4)
	if d := mustGrant(t, c, req(6, Exclusive)); d.Epoch != 1 || !d.Persist {
		t.Fatalf("second exclusive grant: %+v, want epoch 1", d)
	}
}

// A producer that reconnects with the epoch it was granted keeps it; one
// whose epoch the topic moved past is fenced in every exclusive mode,
// without fencing or queueing behind anyone.
func TestEpochFencesStaleProducers(t *testing.T) {
	c := New(4, true)
	if d := mustGrant(t, c, withEpoch(req(1, Exclusive), 4)); d.Epoch != 4 || d.Persist {
		t.Fatalf("reconnect with the current epoch: %+v, want 4 kept, nothing to persist", d)
	}
	c.Remove(1)
	mustGrant(t, c, req(2, ExclusiveWithFencing)) // epoch 5
	for _, m := range []Mode{Exclusive, WaitForExclusive, ExclusiveWithFencing} {
		mustRefuse(t, c, withEpoch(req(3, m), 4), ErrFenced)
	}
	if id, ok := c.Exclusive(); !ok || id != 2 || c.Waiting() != 0 {
		t.Fatalf("a stale producer disturbed the holder: exclusive %d %v, waiting %d", id, ok, c.Waiting())
	}
	// An epoch above the topic's (granted in another region) is adopted.
	c.Remove(2)
	if d := mustGrant(t, c, withEpoch(req(4, Exclusive), 9)); d.Epoch != 9 || !d.Persist {
		t.Fatalf("higher epoch: %+v", d)
	}
}

// ExclusiveWithFencing takes over: the holders are fenced, queued ones
// refused, and the epoch moves.
func TestExclusiveWithFencingTakesOver(t *testing.T) {
	c := New(0, false)
	mustGrant(t, c, req(1, Shared))
	mustGrant(t, c, req(2, Shared))
	if d := c.Add(req(3, WaitForExclusive)); d.Verdict != Queued {
		t.Fatalf("wait-for-exclusive behind shared producers: %v", d.Verdict)
	}
	d := mustGrant(t, c, req(4, ExclusiveWithFencing))
	slices.Sort(d.Fenced)
	if !slices.Equal(d.Fenced, []ID{1, 2, 3}) || !slices.Equal(d.Queued, []ID{3}) || d.Epoch != 0 || !d.Persist {
		t.Fatalf("fencing decision: %+v", d)
	}
	if d := mustGrant(t, c, req(5, ExclusiveWithFencing)); !slices.Equal(d.Fenced, []ID{4}) || d.Epoch != 1 {
		t.Fatalf("second fencing: %+v", d)
	}
	// The fenced producers' removal (their connections closing) changes
	// nothing.
	for _, id := range []ID{1, 2, 3, 4} {
		if p := c.Remove(id); p != nil {
			t.Fatalf("removing fenced %d promoted %+v", id, p)
		}
	}
	if id, _ := c.Exclusive(); id != 5 {
		t.Fatalf("exclusive %d, want 5", id)
	}
}

// WaitForExclusive waits for the topic to have no producer, exclusive or
// shared, then gets it in arrival order; while it waits, Shared and
// Exclusive producers are refused.
func TestWaitForExclusiveQueues(t *testing.T) {
	c := New(0, false)
	mustGrant(t, c, req(1, Exclusive))
	if d := c.Add(req(2, WaitForExclusive)); d.Verdict != Queued {
		t.Fatal(d.Verdict)
	}
	if d := c.Add(req(3, WaitForExclusive)); d.Verdict != Queued {
		t.Fatal(d.Verdict)
	}
	mustRefuse(t, c, req(4, Shared), ErrBusy)
	mustRefuse(t, c, req(5, Exclusive), ErrFenced)
	if p := c.Remove(1); len(p) != 1 || p[0] != (Promotion{ID: 2, Granted: true, Epoch: 1, Persist: true}) {
		t.Fatalf("promotion after the holder left: %+v", p)
	}
	// A queued producer that gives up is just dropped.
	if p := c.Remove(3); p != nil {
		t.Fatalf("removing a queued producer: %+v", p)
	}
	if p := c.Remove(2); p != nil {
		t.Fatalf("nothing left to promote: %+v", p)
	}

	// Behind shared producers: granted when the last one leaves.
	mustGrant(t, c, req(6, Shared))
	mustGrant(t, c, req(7, Shared))
	c.Add(req(8, WaitForExclusive))
	if p := c.Remove(6); p != nil {
		t.Fatalf("promoted while a shared producer remains: %+v", p)
	}
	if p := c.Remove(7); len(p) != 1 || !p[0].Granted || p[0].ID != 8 {
		t.Fatalf("promotion after the last shared producer: %+v", p)
	}
}

// A queued producer whose epoch was passed while it waited is refused at
// promotion and the next one is granted.
func TestPromotionSkipsStaleWaiters(t *testing.T) {
	c := New(3, true)
	mustGrant(t, c, withEpoch(req(1, Exclusive), 3))
	c.Add(withEpoch(req(2, WaitForExclusive), 3))
	c.Add(req(3, WaitForExclusive))
	c.Remove(1)
	// 2 was promoted with epoch 3; it leaves, 3 gets 4.
	if p := c.Remove(2); len(p) != 1 || p[0].ID != 3 || p[0].Epoch != 4 {
		t.Fatalf("%+v", p)
	}
	c2 := New(5, true)
	mustGrant(t, c2, req(1, Shared))
	c2.Add(withEpoch(req(2, WaitForExclusive), 5))
	c2.Add(req(3, WaitForExclusive))
	c2.epoch = 6 // as if granted elsewhere meanwhile
	if p := c2.Remove(1); len(p) != 2 || p[0] != (Promotion{ID: 2}) || !p[1].Granted || p[1].ID != 3 || p[1].Epoch != 7 {
		t.Fatalf("%+v", p)
	}
}

func TestUnknownModeRefused(t *testing.T) {
	mustRefuse(t, New(0, false), req(1, Mode(7)), ErrMode)
}
