// Package entry is the format of a topic's stored entries: the header
// brokers add to each message (the broker's publish time and the entry's
// identity across regions: origin region, origin message id, origin
// sequence number) in front of the message as its producer sent it, and
// the parsing of the message metadata that dispatch and deduplication
// need (entry.go has the layout).
//
// It is pure in behaviour: no I/O, no clock, no goroutines; it imports
// the protocol codec and mledger (for Position, the origin id's type —
// which links what mledger links). The broker's root writes and reads
// entries with it, and the replication room reads them to ship them to
// other regions.
//
// Contract: Decode and ParseMeta accept any bytes, return ErrBadEntry (or
// a wrapped parse error) for what is not an entry, and never panic
// (FuzzParseEntryMeta); an entry re-encodes to the same bytes.
package entry
