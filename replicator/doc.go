// Package replicator moves data between regions: per topic and remote
// region, a state machine with a durable cursor on the topic's local log
// ships entries over gRPC, async or sync; entries carry their origin region,
// origin message id and a dense per-origin sequence so the target applies
// each once, never loops them back and never skips a gap. It never imports
// broker: it defines the small interfaces it needs (a log to read with a
// cursor, an applier that persists replicated entries) and the broker
// implements them. Built by the geo-replication issue.
package replicator
