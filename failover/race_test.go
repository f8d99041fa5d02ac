//go:build race

package failover

// The race detector slows the simulation about fivefold; keep `go test
// -race` fast and soak without it (-failover.sim-seeds).
func init() { simDefaultSeeds = 4 }
