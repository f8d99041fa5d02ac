// Package livetest holds the test of deploy/monitoring against a real
// Prometheus (Debian's prometheus package, the server beside promtool):
// it scrapes a two-region deployment (tools/up, as `meridian up` runs it)
// under load with alerts.yaml loaded, evaluates every dashboard query,
// kills east and watches the region-down, target-down and failover alerts
// fire through Prometheus' HTTP API. It has no code.
package livetest
