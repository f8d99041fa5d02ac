package mledger

import "fmt"

// validateCursor checks a decoded cursor record against the invariants
// cursorCore relies on (cursorcore.go): every acknowledged range is
// ordered (From <= To), after the mark-delete position, and the ranges are
// sorted and disjoint. A record that breaks them was not written by this
// code (corruption, a hostile writer to etcd): it is refused with an error
// rather than fed to the core, where it could make dispatch skip or
// redeliver entries.
func validateCursor(key string, r cursorRecord) error {
	prev := r.markDelete
	for i, a := range r.acked {
		if a.To.Less(a.From) {
			return fmt.Errorf("mledger: record %s: acknowledged range %d ends (%s) before it starts (%s)", key, i, a.To, a.From)
		}
		if !prev.Less(a.From) {
			return fmt.Errorf("mledger: record %s: acknowledged range %d (%s) is not after %s", key, i, a.From, prev)
		}
		prev = a.To
	}
	prev = r.markDelete
	for i, b := range r.batches {
		if !prev.Less(b.Pos) {
			return fmt.Errorf("mledger: record %s: batch ack %d (%s) is not after %s", key, i, b.Pos, prev)
		}
		if len(b.Unacked) == 0 {
			return fmt.Errorf("mledger: record %s: batch ack %d (%s) has no unacknowledged index", key, i, b.Pos)
		}
		prev = b.Pos
	}
	if r.dropped < 0 {
		return fmt.Errorf("mledger: record %s: negative dropped-range count %d", key, r.dropped)
	}
	return nil
}

// validateInfo checks a decoded ledger list: ledger ids strictly
// ascending (the view binary-searches them) and entry counts and sizes
// not negative.
func validateInfo(key string, r infoRecord) error {
	for i, l := range r.ledgers {
		if l.Entries < 0 || l.SizeBytes < 0 {
			return fmt.Errorf("mledger: record %s: ledger %d has %d entries, %d bytes", key, l.ID, l.Entries, l.SizeBytes)
		}
		if i > 0 && l.ID <= r.ledgers[i-1].ID {
			return fmt.Errorf("mledger: record %s: ledger ids not ascending (%d after %d)", key, l.ID, r.ledgers[i-1].ID)
		}
	}
	return nil
}
