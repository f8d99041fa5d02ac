//go:build race

package replicator

// raceEnabled: the race detector slows the simulation about 7×, so it runs
// fewer seeds by default (-sim.seeds overrides).
const raceEnabled = true
