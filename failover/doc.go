// Package failover turns the gossip health view of every region into the
// active-region decision per namespace: when to fail over, when to fail
// back. Its core is pure (health, policy, epoch and time in; active region
// and epoch out); a thin shell commits decisions through the global store
// as epochs by compare-and-swap, so a stale region is fenced, and drives
// clients to the active region. Built by the failover issue.
//
// # The core
//
// A Core decides for one namespace as seen from one region, like raft's
// RawNode: Step(Input) Output, no clock, socket, goroutine or log inside.
// Input: the local monotonic time, every region's RegionStatus (derived
// from health.View by StatusOf), what the global store holds
// (Committed: the Record and the lease key), the lease this region holds
// (LocalLease), and a manual Command. Output: the Instruction for the local
// brokers, a Proposal to commit, lease actions, and a Wake time.
//
// What is persisted and what is not: the Record (active region, epoch,
// previous region, catch-up flag, reason) and the lease key (holder,
// epoch) live in the global store and are the only truth. The Core's own
// memory (since when each region has been continuously up or not up, since
// when the current epoch and a missing lease were seen) is per process and
// lost on restart, which only delays proposals.
//
// # Rules
//
// Conditions (RegionStatus.Condition): healthy → up; suspected with a
// recent successful write probe → up (slow, not dead; latency plays no
// part); suspected → suspect; anything else (failed, unknown, alive with a
// failed write probe) → down.
//
// Active-active: every region serves; nothing is proposed; manual
// failover is refused.
//
// Active-standby, in a region that has not read the store yet (started
// cut off from the store's majority): RetryLater, no proposal. With no
// Record yet: propose epoch 1 for the first region in the policy's order
// that is up.
//
// Failover (proposed by a standby): the active region A has been
// continuously not up for FailoverDelay and is down now, or the store has
// shown no lease of A for the current epoch for FailoverDelay + lease TTL;
// and the store shows no live lease of A (a live lease means the store's
// quorum sees A serving); and the epoch is at least FailoverDelay old.
// Target: the first region in the policy's order, other than A, that is up.
// Flapping — any up observation — restarts the delay, so flaps shorter than
// FailoverDelay never move the namespace.
//
// Handover (proposed by the active region itself): it sees itself down
// (e.g. its write probe fails) for FailoverDelay; target as for failover.
//
// Switch-back (proposed by the active region only, so standbys with other
// views cannot ping-pong the namespace): SwitchBackDelay > 0; the epoch is
// at least SwitchBackDelay old; a region earlier in the order has been
// continuously up for SwitchBackDelay and, if CatchUpRequired, has caught
// up. The new epoch is marked CatchUp: the target serves only once caught
// up on what the old active acknowledged before it stopped (or once the
// old active is seen down for FailoverDelay).
//
// Manual (Command, `meridian admin failover NAMESPACE --to REGION`, from
// any region): proposed at once if the target is in the policy, not already
// active and up in the local view; otherwise refused with the reason
// (Output.Refused wraps ErrRefused). Planned (CatchUp) when the old active
// is up and CatchUpRequired.
//
// Every proposal is From → From+1: exactly one active region per epoch.
// Two regions with different views may propose different targets; the CAS
// lets one win, the other re-reads and follows the record.
//
// Instructions: the active region Serves only while it holds a lease for
// the current epoch that MayAcknowledge allows and, after a planned move,
// once caught up; otherwise RetryLater (acquiring, fenced, catching up). A
// standby Redirects to the active region when it is up; while it is
// suspect or down, Holds lookups until LookupHold after it first looked bad;
// after that it Redirects if the active is only suspect or its lease is
// live, and answers RetryLater if it is down without a lease. A region with
// a stale epoch never serves: its lease belongs to an old epoch (released)
// and the store refuses to give it a new one. No instruction maps to
// TopicNotFound, TopicTerminated or ProducerFenced.
//
// The lease (LeaseRules, MayAcknowledge): the holder stops acknowledging
// TTL·(1-ρ)/(1+ρ) - Margin after it *sent* its last successful renewal, so
// it has stopped before the store can have expired the lease whatever the
// two clocks' rates within ±ρ; a new active region acquires the lease only
// once the old one is gone from the store. Hence serve intervals never
// overlap (sim_test.go checks it with seeded partitions, delays, pauses,
// crashes, drifting clocks and split views).
//
// # The shell's duties
//
//  1. Run one Core per active-standby namespace in each region, owned by
//     one goroutine; create it with the namespace's policy from the global
//     store and DefaultLeaseRules (or configured ones that Validate);
//     replace it when the policy changes.
//  2. Step it on every new HealthView, every change of the namespace's
//     record or lease key (an etcd watch), every lease renewal result, every
//     manual command, at Output.Wake, and on a ticker (e.g. 250 ms). Now is
//     time.Now() with its monotonic reading (never Round(0) it).
//  3. Regions: StatusesOf(view, policy, caughtUp). caughtUp for a region is
//     that region's own published judgement of its replication lag for the
//     namespace (a gossip tag or a key it writes); after a planned move, lag
//     zero up to the previous active region's last acknowledged entry.
//  4. Committed: Read stays false until the first linearizable read of the
//     store succeeds (so a region that starts cut off starts as standby);
//     feed records in non-decreasing epoch order.
//  5. Apply each Output in this order: (a) the Instruction to the brokers —
//     stop acknowledging first; (b) ReleaseLease: revoke the lease only
//     after the brokers stopped; (c) Proposal: one etcd txn, if the stored
//     epoch is still Proposal.From (for 0: the key is absent) then put
//     Proposal.Record(wall now); a lost CAS means re-read and Step again,
//     never retrying the same proposal; (d) AcquireLease: grant an etcd
//     lease and, in one txn, create the lease key {region, epoch} with it
//     only if the key is absent and the record still names this region in
//     this epoch. LocalLease.RenewedAt is the send time of that txn.
//  6. Renew every LeaseRules.RenewEvery with a single keep-alive request
//     (not the background KeepAlive stream: the send time is needed), set
//     RenewedAt to that request's send time on success, drop the LocalLease
//     when the store says the lease is gone. Use the TTL etcd granted (it
//     rounds up to whole seconds).
//  7. In the broker, check MayAcknowledge(time.Now(), RenewedAt, TTL,
//     rules) right before every produce acknowledgement and subscription,
//     not only the last Step's Instruction: that is the self-fence, and it
//     also covers a process that was paused between steps.
//  8. Map instructions to the Pulsar protocol: Serve → lookups answer the
//     local owner; Redirect → lookups answer a broker of To (Redirect) and
//     the namespace's producers and consumers are closed
//     (CLOSE_PRODUCER/CLOSE_CONSUMER) so clients look up again; Hold →
//     delay lookup answers until Until or until a Step changes the answer;
//     RetryLater → ServiceNotReady (retriable) on lookup, produce and
//     subscribe.
//  9. Answer the operator's failover command with Output.Refused or the
//     committed epoch; log proposals, CAS results and instruction changes
//     (the core does not log); count them in metrics.
package failover
