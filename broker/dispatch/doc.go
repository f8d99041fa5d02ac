// Package dispatch is the pure core of a subscription's dispatch: which
// consumer receives which entry, for each subscription type, and what
// waits. The broker's subscription (broker/subscription.go) is its shell:
// it reads entries from the managed ledger, writes MESSAGEs to
// connections, runs the dispatch goroutine and holds the lock.
//
// # What it owns
//
// One Core per subscription holds the consumers (in joining order, with
// priority level, readiness, permits and their Key_Shared ring points),
// the pending entries (dispatched, not acknowledged: to whom, how many
// messages, their key hash), the replay set (entries to send again before
// new ones), redelivery counts, partial batch-index acks and the
// Key_Shared draining hashes. Inputs: Admit and AddConsumer, Ready,
// RemoveConsumer, Flow, Ack and AckCumulative, Redeliver, Reset (seek),
// ForgetThrough (TTL, eviction), and the entries of a round (Replayed,
// Read). Outputs: Deliveries (entry → consumer, redelivery count, ack
// set), what to read (a round's replays, ToRead), positions to
// acknowledge on the cursor, ActiveChanges for Failover.
//
// Delayed (delayed.go) is the delayed-delivery index of a Shared or
// Key_Shared subscription: entries held until their deliver_at_time, in
// buckets persisted by the shell (broker/delayed.go); its caller's duties
// are on its type.
//
// No goroutines, clock, I/O, locks or logging; it imports nothing of the
// broker (not even mledger: Position has mledger.Position's fields, so the
// two convert into each other), only the standard library.
//
// # Rules
//
// Exclusive: one consumer; it receives everything. Failover: the active
// consumer is the first sorted by priority level, then name (stable, so
// equal ones in joining order) — for partition i of a partitioned topic the
// (i mod n)-th — and receives everything; ready consumers are told when
// they become active or inactive. Shared: round robin in joining order
// over the ready consumers with permits. Key_Shared: a key goes to its
// owner on a consistent-hash ring (100 points per consumer from its name
// and consumer id, so a joining consumer takes keys only for itself),
// unless the key's hash is draining: while a consumer holds unacknowledged
// entries of a hash, further entries of it go to that consumer (or wait),
// so a key is never in two consumers' hands at once (Pulsar's PIP-379).
//
// Permits count messages; an entry may take them below zero (a batch).
// A consumer receives only while ready and with permits > 0.
//
// Order: a round sends replays first, in position order, then new entries.
// Under Exclusive and Failover nothing passes a held entry: a held replay
// ends the round's replays and no new entry is read; a held new entry
// sends the rest of its read to replay behind it; a new entry never
// overtakes an older one in replay. Under Key_Shared the same holds per key
// hash (a held entry blocks its hash for the round; other keys flow).
// Under Shared nothing is ordered. Redelivery counts count sends from
// replay, so an entry first sent from replay (it was held back) goes out
// with count 1.
//
// A round sends at most RoundMax entries, and reads as many new entries as
// its permits cover at the messages per entry seen so far (EntriesFor,
// Average), so a read rarely has entries left that no consumer can take.
//
// # The caller's duties
//
//  1. Serialize every call on a Core and on its Rounds (the broker holds
//     the subscription's mutex around each Core call; a Round belongs to the
//     dispatch goroutine, and its own methods need no lock). Never do I/O
//     while holding that lock.
//  2. Give each consumer an ID unique for the Core's life. On SUBSCRIBE:
//     Admit (answer its error as ConsumerBusy), then check the broker's own
//     limits, then AddConsumer; call Ready once SUCCESS was sent. Call
//     RemoveConsumer when the consumer closes or its connection goes.
//  3. After Ready, RemoveConsumer and Flow, send the ActiveChanges
//     (ACTIVE_CONSUMER_CHANGE) after releasing the lock, in order.
//  4. Run rounds after every input that can let dispatch progress (Ready,
//     RemoveConsumer, Flow, acks, Redeliver, a new entry in the log) and
//     again at once while a round read new entries. A round:
//     (a) StartRound; nil means nobody can receive: wait for an input.
//     (b) For each NextReplay position, read that one entry (unlocked): on
//     a read error call ReplayFailed and retry the round later; if the log
//     no longer stores it, ReplayGone; else offer it with Replayed.
//     (c) ToRead(r, average) new entries, read from the cursor (unlocked);
//     offer each one the cursor has not acknowledged, in log order, with
//     Read. On a read error retry later.
//     (d) Send each Deliver outcome's Delivery, in the order returned,
//     after releasing the lock; fold its NumMessages into the average
//     (Average). For a Discard outcome, log the entry and acknowledge it on
//     the cursor.
//     Parse an entry's metadata into Entry (Key, NumMessages) before
//     offering it; one that does not parse is offered as Undecodable.
//  5. Acks: pass the local positions (origin ids translated) to Ack or
//     AckCumulative, then acknowledge on the cursor what they return, and
//     run a round. Redeliver takes the positions of a negative ack.
//  6. Seek: Reset, reset the cursor, close every consumer (RemoveConsumer).
//     When the broker acknowledges entries itself (TTL, backlog eviction),
//     ForgetThrough the position and move the cursor's read position past
//     it if it was behind.
package dispatch
