package drill

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/meridian-mq/meridian/tools/up"
)

// admin talks to a deployment's brokers' admin APIs.
type admin struct {
	plan *up.Plan
	http *http.Client
}

func newAdmin(p *up.Plan) *admin {
	return &admin{plan: p, http: &http.Client{Timeout: 3 * time.Second}}
}

// call sends a request to the brokers of region ("" = any region) in turn
// until one answers, and decodes a 2xx answer into out.
func (a *admin) call(ctx context.Context, region, method, path string, body, out any) error {
	var lastErr error
	for _, ps := range a.plan.Procs {
		if ps.Role != "broker" || (region != "" && ps.Region != region) {
			continue
		}
		err := a.callOne(ctx, ps, method, path, body, out)
		if errors.As(err, new(httpStatus)) {
			return err
		}
		if err == nil {
			return nil
		}
		lastErr = err
	}
	if lastErr == nil {
		lastErr = fmt.Errorf("no broker in region %q", region)
	}
	return lastErr
}

// httpStatus is an answer that was not 2xx.
type httpStatus struct {
	code int
	msg  string
}

func (e httpStatus) Error() string { return fmt.Sprintf("%d %s", e.code, e.msg) }

// callOne sends a request to one broker's admin API.
func (a *admin) callOne(ctx context.Context, ps up.ProcSpec, method, path string, body, out any) error {
	return a.callOneWith(ctx, ps, method, path, nil, body, out)
}

// callOneWith is callOne with extra request headers.
func (a *admin) callOneWith(ctx context.Context, ps up.ProcSpec, method, path string, hdr map[string]string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://"+ps.Admin+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := a.http.Do(req)
	if err != nil {
		return err
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s %s: %w", method, path, httpStatus{resp.StatusCode, string(bytes.TrimSpace(b))})
	}
	if out != nil && len(b) > 0 {
		return json.Unmarshal(b, out)
	}
	return nil
}

type replStatus struct {
	Topic          string
	Remote         string
	BacklogEntries int64
}

// backlog is the replication backlog (entries not yet acknowledged by a
// remote region) of every replicated topic whose replicators run in
// region.
func (a *admin) backlog(ctx context.Context, region string) (int64, error) {
	var st []replStatus
	if err := a.call(ctx, region, "GET", "/admin/v2/meridian/replication", nil, &st); err != nil {
		return 0, err
	}
	var n int64
	for _, s := range st {
		n += s.BacklogEntries
	}
	return n, nil
}

type failoverRecord struct {
	Namespace, Active string
	Epoch             uint64
}

// activeRegion is the namespace's active region as region's brokers see it.
func (a *admin) activeRegion(ctx context.Context, region, ns string) (string, error) {
	var recs []failoverRecord
	if err := a.call(ctx, region, "GET", "/admin/v2/meridian/failover/"+ns, nil, &recs); err != nil {
		return "", err
	}
	for _, r := range recs {
		if r.Namespace == ns || len(recs) == 1 {
			return r.Active, nil
		}
	}
	return "", nil
}

type internalStats struct {
	Ledgers []struct {
		LedgerID int64 `json:"ledgerId"`
	} `json:"ledgers"`
}

// ledgers lists the ledgers of region's copy of topic (persistent://...).
func (a *admin) ledgers(ctx context.Context, region, topic string) ([]int64, error) {
	var st internalStats
	path := "/admin/v2/persistent/" + trimScheme(topic) + "/internalStats"
	if err := a.call(ctx, region, "GET", path, nil, &st); err != nil {
		return nil, err
	}
	out := make([]int64, 0, len(st.Ledgers))
	for _, l := range st.Ledgers {
		out = append(out, l.LedgerID)
	}
	return out, nil
}

func trimScheme(topic string) string {
	const p = "persistent://"
	if len(topic) > len(p) && topic[:len(p)] == p {
		return topic[len(p):]
	}
	return topic
}
