package drill

import (
	"context"
	"net/http"
	"time"
)

// Every drill ends with a verify step (issue 33, item 3): once the
// consumers drained, the drill waits (up to verifyBacklogWait) for the
// replication backlog of the regions that answer to reach 0, then asks
// what `meridian admin replication verify NS` asks
// (GET /admin/v2/meridian/replication/verify/NS) for each replicated
// namespace, of a broker of the first of its regions that answers. The
// report shows the totals beside the RPO; verify_missing,
// verify_mismatched and verify_extra are figures an expectation can
// bound. A region that is down when the drill ends (killed and not
// restarted) cannot be read: the answer says so (unreachable) and its
// namespace is not clean.

// verifyBacklogWait bounds the wait for the replication backlog to drain
// before the verify step.
const verifyBacklogWait = 15 * time.Second

// Verify is one namespace's verify step.
type Verify struct {
	Namespace     string `json:"namespace"`
	Region        string `json:"asked_in,omitempty"` // the region whose broker answered
	Clean         bool   `json:"clean"`
	Topics        int    `json:"topics"`
	Compared      uint64 `json:"compared"`
	Missing       uint64 `json:"missing"`
	Extra         uint64 `json:"extra"`
	Mismatched    uint64 `json:"mismatched"`
	Trimmed       uint64 `json:"trimmed"`
	NotReplicated uint64 `json:"not_replicated"`
	// Unreachable counts the topics with a region not read.
	Unreachable int     `json:"unreachable"`
	Seconds     float64 `json:"seconds"`
	Error       string  `json:"error,omitempty"`
}

// verifyAnswer is the admin API's answer (broker/replication
// VerifyReport), the fields the drill reports.
type verifyAnswer struct {
	Topics        []struct{} `json:"topics"`
	Compared      uint64     `json:"compared"`
	Missing       uint64     `json:"missing"`
	Extra         uint64     `json:"extra"`
	Mismatched    uint64     `json:"mismatched"`
	Trimmed       uint64     `json:"trimmed"`
	NotReplicated uint64     `json:"notReplicated"`
	Unreachable   int        `json:"unreachable"`
	Clean         bool       `json:"clean"`
}

// replicated lists the drill's namespaces over several regions.
func (s *Scenario) replicated() []Namespace {
	var out []Namespace
	for _, ns := range s.Namespaces {
		if len(ns.Regions) > 1 {
			out = append(out, ns)
		}
	}
	return out
}

// verify runs the verify step.
func (r *runner) verify(ctx context.Context) []Verify {
	nss := r.s.replicated()
	if len(nss) == 0 {
		return nil
	}
	for deadline := time.Now().Add(verifyBacklogWait); time.Now().Before(deadline) && ctx.Err() == nil; time.Sleep(500 * time.Millisecond) {
		var total int64
		for _, region := range r.s.Topology.Regions {
			c, cancel := context.WithTimeout(ctx, time.Second)
			if n, err := r.adm.backlog(c, region); err == nil {
				total += n
			}
			cancel()
		}
		if total == 0 {
			break
		}
	}
	// Verify reads every topic in every region: longer than the admin
	// client's 3 s (the broker gives a call 30 s).
	long := &admin{plan: r.adm.plan, http: &http.Client{Timeout: 45 * time.Second}}
	var out []Verify
	for _, ns := range nss {
		v := Verify{Namespace: ns.Name}
		start := time.Now()
		var lastErr error
		for _, region := range ns.Regions {
			var a verifyAnswer
			err := long.call(ctx, region, "GET", "/admin/v2/meridian/replication/verify/"+ns.Name+"?settle=0s", nil, &a)
			if err != nil {
				lastErr = err
				continue
			}
			v.Region, v.Clean, v.Topics = region, a.Clean, len(a.Topics)
			v.Compared, v.Missing, v.Extra, v.Mismatched, v.Trimmed, v.NotReplicated, v.Unreachable = a.Compared, a.Missing, a.Extra, a.Mismatched, a.Trimmed, a.NotReplicated, a.Unreachable
			lastErr = nil
			break
		}
		if lastErr != nil {
			v.Error = lastErr.Error()
		}
		v.Seconds = time.Since(start).Seconds()
		out = append(out, v)
	}
	return out
}

// verifyFigures are the verify step's totals as figures.
func verifyFigures(vs []Verify) map[string]float64 {
	if len(vs) == 0 {
		return nil
	}
	m := map[string]float64{}
	for _, v := range vs {
		m["verify_missing"] += float64(v.Missing)
		m["verify_mismatched"] += float64(v.Mismatched)
		m["verify_extra"] += float64(v.Extra)
		m["verify_unreachable"] += float64(v.Unreachable)
		if v.Error != "" {
			m["verify_unanswered"]++
		}
	}
	return m
}
