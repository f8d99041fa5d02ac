// Package failover turns the gossip health view of every region into the
// active-region decision per namespace: when to fail over, when to fail
// back. Its core is pure (health, policy, epoch and time in; active region
// and epoch out); a thin shell commits decisions through the global store
// as epochs by compare-and-swap, so a stale region is fenced, and drives
// clients to the active region. Built by the failover issue.
package failover
