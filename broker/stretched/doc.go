// Package stretched is the broker's stretched placement (namespace mode
// stretched): each topic's ledgers written to bookies of several regions
// before an entry is acknowledged, with their metadata in the global
// store so a surviving region can recover them, and the degraded
// placement that keeps a namespace writable inside the surviving regions
// after a region loss (stretched.go has the rules and the durability
// claim).
//
// It imports broker/meta, broker/mledger, bookie/ledger, cluster, rack and
// the failover core's region status, never the broker's root or another
// room; what it needs of the broker (the regions a failover declared
// failed, rolling loaded topics onto a new ledger) it asks through Host.
//
// Contract with its caller:
//  1. Start returns nil when the broker is not multi-region: refuse
//     stretched namespaces there. Close when the broker stops, after its
//     topics are closed.
//  2. A stretched topic's managed ledger is opened with the config
//     LedgerConfig returns (its Adjust decides each new ledger's
//     placement from the regions gone now).
package stretched
