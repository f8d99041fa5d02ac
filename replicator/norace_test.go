//go:build !race

package replicator

const raceEnabled = false
