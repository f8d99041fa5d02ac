package healthz

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func get(t *testing.T, srv *httptest.Server, path string) (int, string) {
	t.Helper()
	resp, err := http.Get(srv.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b))
}

// Each endpoint goes red for the reason it names, says only that name,
// and goes green again when the reason is gone.
func TestEndpointsNameTheFailingCheckOnly(t *testing.T) {
	var now atomic.Int64
	now.Store(time.Unix(100, 0).UnixNano())
	c := New()
	c.now = func() time.Time { return time.Unix(0, now.Load()) }
	turn := c.Loop("accept-loop", 5*time.Second)
	var storeErr atomic.Pointer[error]
	c.Ready("metadata-store", func(context.Context) error {
		if e := storeErr.Load(); e != nil {
			return *e
		}
		return nil
	})
	var logged []string
	mux := http.NewServeMux()
	c.Register(mux, func(ep string, err error) { logged = append(logged, ep+" "+err.Error()) })
	srv := httptest.NewServer(mux)
	defer srv.Close()

	for _, p := range []string{"/healthz", "/readyz"} {
		if code, body := get(t, srv, p); code != 200 || body != "ok" {
			t.Fatalf("%s: %d %q, want 200 ok", p, code, body)
		}
	}
	if code, body := get(t, srv, "/status.html"); code != 200 || body != "OK" {
		t.Fatalf("/status.html: %d %q", code, body)
	}

	secret := errors.New("dial tcp 10.1.2.3:2379: connection refused")
	storeErr.Store(&secret)
	if code, body := get(t, srv, "/readyz"); code != 503 || body != "not ready: metadata-store" {
		t.Fatalf("store down: /readyz %d %q", code, body)
	}
	if code, _ := get(t, srv, "/healthz"); code != 200 {
		t.Fatalf("store down: /healthz %d, want 200 (a restart would not cure it)", code)
	}
	if len(logged) != 1 || !strings.Contains(logged[0], "10.1.2.3") {
		t.Fatalf("the cause is not logged: %q", logged)
	}
	storeErr.Store(nil)

	now.Add(int64(6 * time.Second)) // the loop wedged
	if code, body := get(t, srv, "/healthz"); code != 503 || body != "not live: accept-loop" {
		t.Fatalf("wedged loop: /healthz %d %q", code, body)
	}
	if code, body := get(t, srv, "/readyz"); code != 503 || body != "not ready: accept-loop" {
		t.Fatalf("wedged loop: /readyz %d %q", code, body)
	}
	turn()
	if code, _ := get(t, srv, "/healthz"); code != 200 {
		t.Fatalf("after a turn: /healthz %d", code)
	}

	c.Drain("stopping")
	if code, body := get(t, srv, "/readyz"); code != 503 || body != "not ready: stopping" {
		t.Fatalf("draining: /readyz %d %q", code, body)
	}
	if code, _ := get(t, srv, "/status.html"); code != 404 {
		t.Fatalf("draining: /status.html %d, want 404", code)
	}
	if code, _ := get(t, srv, "/healthz"); code != 200 {
		t.Fatalf("draining: /healthz %d, want 200 (alive while it hands over)", code)
	}
}

// A check that hangs is cut at CheckTimeout, and counts as failed.
func TestHangingCheckFails(t *testing.T) {
	c := New()
	c.Ready("hangs", func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() })
	start := time.Now()
	err := c.IsReady(context.Background())
	if err == nil || publicReason(err) != "hangs" {
		t.Fatalf("IsReady = %v", err)
	}
	if d := time.Since(start); d > CheckTimeout+time.Second {
		t.Fatalf("took %s", d)
	}
}
