// Package monitoring holds what an operator's Prometheus and Grafana take
// from Meridian: the alerting rules (alerts.yaml, their promtool unit tests
// in alerts_test.yaml, their runbooks in docs/operations.md) and the
// Grafana dashboards (grafana/dashboards/*.json, with provisioning files in
// grafana/provisioning/). Its only code lists the dashboards' PromQL
// queries (Queries), for the tests that check them: here with promtool
// (Debian's prometheus package, which .ci/run installs), in broker's
// tests against a real standalone's metrics, in livetest/ in a real
// Prometheus.
package monitoring
