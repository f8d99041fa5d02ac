package mledger

import "time"

// Pure decisions of the managed ledger: when to roll the current ledger
// over and which ledgers trimming deletes. They take the state and the time
// as inputs, so they are tested without bookies or clocks.

// rollReason says why the current ledger must be rolled over before the
// next append, or "" if it need not.
func rollReason(cfg *Config, entries, sizeBytes int64, createdAt, now time.Time) string {
	switch {
	case entries >= int64(cfg.MaxEntriesPerLedger):
		return "entries"
	case sizeBytes >= cfg.MaxSizePerLedgerBytes:
		return "size"
	case entries > 0 && now.Sub(createdAt) >= cfg.MaxLedgerAge:
		// An empty ledger is never rolled for age: it would only make
		// another empty one.
		return "age"
	}
	return ""
}

// trimInput is what the trim decision looks at.
type trimInput struct {
	// ledgers, ascending; the last one may be the ledger being written.
	ledgers []LedgerInfo
	// current is the id of the ledger being written (never deleted), 0 if
	// none.
	current int64
	// slowest is the lowest mark-delete position among durable cursors, as
	// persisted; ignored when hasDurable is false (then every ledger before
	// the current one counts as consumed).
	slowest    Position
	hasDurable bool
	now        time.Time
	// Retention, as in Config.
	retentionTime  time.Duration
	retentionBytes int64
}

// ledgersToTrim returns the ids of the ledgers to delete: the longest prefix
// of the list whose ledgers are (1) closed and not the current ledger,
// (2) fully consumed by every durable cursor, and (3) outside retention:
// neither younger than retentionTime (counted from when the ledger was
// closed) nor within the newest retentionBytes of consumed data. A ledger
// is kept if either retention rule keeps it; -1 in either keeps everything,
// 0 in both deletes consumed ledgers at once.
func ledgersToTrim(in trimInput) []int64 {
	if in.retentionTime < 0 || in.retentionBytes < 0 {
		return nil
	}
	consumed := 0
	for i, l := range in.ledgers {
		// The ledger being written, and the last ledger of the list, stay.
		if l.ID == in.current || !l.Closed || i == len(in.ledgers)-1 {
			break
		}
		if in.hasDurable && in.slowest.Less(Position{l.ID, l.Entries - 1}) {
			break
		}
		consumed++
	}
	// suffix[i] = bytes of consumed ledgers i..consumed-1.
	suffix := make([]int64, consumed+1)
	for i := consumed - 1; i >= 0; i-- {
		suffix[i] = suffix[i+1] + in.ledgers[i].SizeBytes
	}
	var out []int64
	for i := 0; i < consumed; i++ {
		l := in.ledgers[i]
		withinTime := in.retentionTime > 0 && in.now.Sub(l.ClosedAt) <= in.retentionTime
		withinSize := in.retentionBytes > 0 && suffix[i] <= in.retentionBytes
		if withinTime || withinSize {
			break
		}
		out = append(out, l.ID)
	}
	return out
}
