package drill

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"
)

// The RPO budget's hold periods (issue 33 item 2): for a namespace with
// maxReplicationLagMs or maxReplicationLagBytes, the sampler reads each
// region's RPO read every second (GET /admin/v2/meridian/replication/rpo/NS)
// and keeps its transitions, which carry their own times: the report lists
// them and the timeline shades each period the gate was closed. A region
// that dies takes its transitions since the last sample with it (at most
// one second's).

// RPOEvent is one transition of a topic's RPO budget in a region.
type RPOEvent struct {
	T      float64 `json:"t"` // seconds since the workload started
	Region string  `json:"region"`
	Topic  string  `json:"topic"`
	Remote string  `json:"remote,omitempty"` // "" for the gate
	State  string  `json:"state"`
}

// RPOPeriod is a period the gate of a topic was closed in a region.
type RPOPeriod struct {
	Region string  `json:"region"`
	Topic  string  `json:"topic"`
	Action string  `json:"action"` // hold or refuse
	From   float64 `json:"from"`
	To     float64 `json:"to"`
	// Open: the gate had not opened by the region's last answer (To is
	// that answer's time: the region died, or the drill ended).
	Open bool `json:"still_closed,omitempty"`
}

type rpoTopicRead struct {
	Topic  string
	Events []struct {
		At     time.Time
		Remote string
		State  string
	}
}

// budgeted lists the drill's namespaces with an RPO budget.
func (r *runner) budgeted() []string {
	var out []string
	for _, ns := range r.s.Namespaces {
		if ns.Replication["maxReplicationLagMs"] != nil || ns.Replication["maxReplicationLagBytes"] != nil {
			out = append(out, ns.Name)
		}
	}
	return out
}

// sampleRPO reads every region's RPO read of the budgeted namespaces.
func (r *runner) sampleRPO(ctx context.Context) {
	for _, ns := range r.budgeted() {
		for _, region := range r.s.Topology.Regions {
			c, cancel := context.WithTimeout(ctx, time.Second)
			var out []rpoTopicRead
			err := r.adm.call(c, region, "GET", "/admin/v2/meridian/replication/rpo/"+ns, nil, &out)
			cancel()
			if err != nil {
				continue
			}
			now := time.Since(r.start).Seconds()
			r.mu.Lock()
			if r.rpoSeen == nil {
				r.rpoSeen, r.rpoLast = map[string]bool{}, map[string]float64{}
			}
			r.rpoLast[region] = now
			for _, t := range out {
				for _, e := range t.Events {
					k := fmt.Sprintf("%s|%s|%s|%s|%d", region, t.Topic, e.Remote, e.State, e.At.UnixNano())
					if r.rpoSeen[k] || e.At.Before(r.start) {
						continue
					}
					r.rpoSeen[k] = true
					r.rpo = append(r.rpo, RPOEvent{T: e.At.Sub(r.start).Seconds(), Region: region, Topic: t.Topic, Remote: e.Remote, State: e.State})
				}
			}
			r.mu.Unlock()
		}
	}
}

// rpoPeriods turns the gate transitions into closed periods; lastSeen is
// each region's last answer.
func rpoPeriods(evs []RPOEvent, lastSeen map[string]float64) []RPOPeriod {
	evs = slices.Clone(evs)
	slices.SortStableFunc(evs, func(a, b RPOEvent) int {
		switch {
		case a.T < b.T:
			return -1
		case a.T > b.T:
			return 1
		}
		return 0
	})
	open := map[string]*RPOPeriod{} // region|topic → the period not yet ended
	var out []RPOPeriod
	for _, e := range evs {
		if e.Remote != "" {
			continue
		}
		k := e.Region + "|" + e.Topic
		if p := open[k]; p != nil {
			p.To = e.T
			out = append(out, *p)
			delete(open, k)
		}
		if e.State == "hold" || e.State == "refuse" {
			open[k] = &RPOPeriod{Region: e.Region, Topic: e.Topic, Action: e.State, From: e.T}
		}
	}
	for _, p := range open {
		p.To, p.Open = max(p.From, lastSeen[p.Region]), true
		out = append(out, *p)
	}
	slices.SortFunc(out, func(a, b RPOPeriod) int {
		if a.From != b.From {
			if a.From < b.From {
				return -1
			}
			return 1
		}
		return strings.Compare(a.Topic, b.Topic)
	})
	return out
}
