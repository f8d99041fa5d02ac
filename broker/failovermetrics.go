package broker

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meridian-mq/meridian/broker/failoverctl"
	"github.com/meridian-mq/meridian/failover"
)

// failoverCollector exports, at scrape time, what the alerting rules of
// deploy/monitoring/ need of the failover shell and the probes: every
// region's condition as this broker's gossip view judges it, each
// active-standby namespace's epoch and active region, whether this
// region fenced itself for it, and whether the broker is ready.
type failoverCollector struct {
	b                               *Broker
	condition, epoch, lapsed, ready *prometheus.Desc
}

// readyTimeout bounds the readiness checks a scrape runs (/readyz's).
const readyTimeout = time.Second

func newFailoverCollector(b *Broker, cluster string) *failoverCollector {
	l := prometheus.Labels{"cluster": cluster}
	return &failoverCollector{b: b,
		condition: prometheus.NewDesc("meridian_region_condition",
			"1 for a region's condition for failover as this broker's gossip view judges it (condition up, suspect or down), 0 for the others.", []string{"region", "condition"}, l),
		epoch: prometheus.NewDesc("meridian_failover_epoch",
			"An active-standby namespace's failover epoch, with its active region, as this broker last saw the record.", []string{"namespace", "active_region"}, l),
		lapsed: prometheus.NewDesc("meridian_failover_lease_lapsed",
			"1 while this region is a namespace's active region and its lease lapsed without a renewal: it fenced itself and acknowledges no produce for the namespace.", []string{"namespace"}, l),
		ready: prometheus.NewDesc("meridian_broker_ready",
			"1 when the broker's readiness checks (/readyz) pass at the scrape, 0 otherwise.", nil, l),
	}
}

func (c *failoverCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.condition
	ch <- c.epoch
	ch <- c.lapsed
	ch <- c.ready
}

func (c *failoverCollector) Collect(ch chan<- prometheus.Metric) {
	if c.b.cfg.HealthView != nil {
		view := c.b.cfg.HealthView()
		for _, r := range view.Regions() {
			cond := failover.StatusOf(view, r, false).Condition()
			for _, k := range []failover.Condition{failover.Up, failover.Suspect, failover.Down} {
				v := 0.0
				if k == cond {
					v = 1
				}
				ch <- prometheus.MustNewConstMetric(c.condition, prometheus.GaugeValue, v, label(r), k.String())
			}
		}
	}
	var leases []failoverctl.NamespaceLease
	if c.b.foStarted.Load() {
		leases = c.b.fo.Leases()
	}
	for _, l := range leases {
		ch <- prometheus.MustNewConstMetric(c.epoch, prometheus.GaugeValue, float64(l.Epoch), label(l.Namespace), label(l.Active))
		v := 0.0
		if l.Lapsed {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(c.lapsed, prometheus.GaugeValue, v, label(l.Namespace))
	}
	if c.b.health != nil {
		ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
		defer cancel()
		v := 0.0
		if c.b.health.IsReady(ctx) == nil {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(c.ready, prometheus.GaugeValue, v)
	}
}
