// Package monitoring holds what an operator's Prometheus and Grafana take
// from Meridian: the alerting rules (alerts.yaml, their promtool unit tests
// in alerts_test.yaml, their runbooks in docs/operations.md). It has no
// code; its tests check the rules with promtool (Debian's prometheus
// package, which .ci/run installs).
package monitoring
