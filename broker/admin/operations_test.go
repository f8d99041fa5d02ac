package admin

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/broker/meta"
	"github.com/prometheus/client_golang/prometheus"
)

// slowFailover is a manual failover that waits for release.
type slowFailover struct {
	release chan struct{}
	gotCtx  chan context.Context
}

func (f *slowFailover) Failover(ctx context.Context, ns, region, reason string) (meta.FailoverRecord, error) {
	f.gotCtx <- ctx
	select {
	case <-f.release:
		return meta.FailoverRecord{Active: region}, nil
	case <-ctx.Done():
		return meta.FailoverRecord{}, ctx.Err()
	}
}
func (f *slowFailover) FailoverStatus(context.Context, string) (any, error) { return nil, nil }
func (f *slowFailover) Orphans(context.Context, string) (any, error)        { return nil, nil }
func (f *slowFailover) RepublishOrphans(context.Context, string, string) (any, error) {
	return nil, nil
}
func (f *slowFailover) Switchover(context.Context, string, string, time.Duration, bool, string) (any, error) {
	return nil, nil
}
func (f *slowFailover) RegionSwitchover(context.Context, string, string, time.Duration, bool, string) (any, error) {
	return nil, nil
}
func (f *slowFailover) SwitchoverLocal(context.Context, string, string, url.Values, []byte) (any, error) {
	return nil, nil
}

// Issue 30, item 5: a planned switchover asked with "Prefer:
// respond-async" is answered 202 at once with the Location of its state,
// while it runs on past the request; GET there answers "running", then
// its result. Without the header the call still answers when done.
func TestLongOperationAnswers202WithStatusURL(t *testing.T) {
	fo := &slowFailover{release: make(chan struct{}), gotCtx: make(chan context.Context, 2)}
	s := New(Config{Addr: "127.0.0.1:0", Metrics: prometheus.NewRegistry(), Failover: fo})
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	client := &http.Client{Timeout: 5 * time.Second}
	req, _ := http.NewRequest("POST", s.URL()+"/admin/v2/meridian/failover/public/default", strings.NewReader(`{"to":"west"}`))
	req.Header.Set("Prefer", "respond-async")
	resp, err := client.Do(req) // the failover is held: a synchronous call would time out
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	loc := resp.Header.Get("Location")
	if resp.StatusCode != http.StatusAccepted || !strings.HasPrefix(loc, "/admin/v2/meridian/operations/") {
		t.Fatalf("answer %d Location %q, want 202 and an operation's URL", resp.StatusCode, loc)
	}
	<-fo.gotCtx // running, on a context of its own: the request has ended
	get := func() Operation {
		t.Helper()
		resp, err := client.Get(s.URL() + loc)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var op Operation
		if resp.StatusCode != 200 || json.NewDecoder(resp.Body).Decode(&op) != nil {
			t.Fatalf("GET %s: %d", loc, resp.StatusCode)
		}
		return op
	}
	if op := get(); op.State != "running" || op.Route != "POST /admin/v2/meridian/failover/{tenant}/{ns}" {
		t.Fatalf("while held: %+v", op)
	}
	close(fo.release)
	deadline := time.Now().Add(5 * time.Second)
	op := get()
	for op.State == "running" && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
		op = get()
	}
	res, _ := json.Marshal(op.Result)
	if op.State != "succeeded" || op.Finished == nil || !strings.Contains(string(res), `"west"`) {
		t.Fatalf("after release: %+v result %s", op, res)
	}
	// Synchronous, as before.
	resp, err = client.Post(s.URL()+"/admin/v2/meridian/failover/public/default", "application/json", strings.NewReader(`{"to":"east"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("synchronous failover: %d", resp.StatusCode)
	}
	if resp, err := client.Get(s.URL() + "/admin/v2/meridian/operations/nosuch"); err != nil || resp.StatusCode != 404 {
		t.Fatalf("unknown operation: %v %v", resp, err)
	}
}
