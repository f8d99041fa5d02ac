package testutil

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// Probe returns the status and the trimmed body of GET url (0 and "" when
// the request fails): for the health endpoints (/healthz, /readyz,
// /status.html), which answer a short text.
func Probe(url string) (int, string) {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return 0, ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b))
}

// WaitProbe waits, within the given time, until url answers code with
// body, and fails the test with the last answer otherwise.
func WaitProbe(t testing.TB, url string, code int, body string, within time.Duration) {
	t.Helper()
	var lastCode int
	var lastBody string
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if lastCode, lastBody = Probe(url); lastCode == code && lastBody == body {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s: %d %q after %s, want %d %q", url, lastCode, lastBody, within, code, body)
}
