package admin

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/meridian-mq/meridian/broker/meta"
)

// A topic's call on a broker that does not own the topic goes to the
// owner with the same path and query and authoritative=true; a call that
// already was redirected, or another error, is not redirected.
func TestOwnerRedirect(t *testing.T) {
	none := func() string { return "" }
	notOwner := meta.NotOwnerError{OwnerAdminURL: "http://10.0.0.2:8080", Err: fmt.Errorf("%w: owned by b2", meta.ErrTopicFenced)}
	r := httptest.NewRequest("GET", "http://10.0.0.1:8080/admin/v2/persistent/t/n/x/stats?getPreciseBacklog=true", nil)
	loc, ok := ownerRedirect(r, fmt.Errorf("loading: %w", notOwner), none)
	if want := "http://10.0.0.2:8080/admin/v2/persistent/t/n/x/stats?authoritative=true&getPreciseBacklog=true"; !ok || loc != want {
		t.Errorf("%q %v, want %q", loc, ok, want)
	}
	if !errors.Is(notOwner, meta.ErrTopicFenced) {
		t.Error("NotOwnerError does not wrap ErrTopicFenced")
	}
	again := httptest.NewRequest("GET", "http://10.0.0.2:8080/admin/v2/persistent/t/n/x/stats?authoritative=true", nil)
	if loc, ok := ownerRedirect(again, notOwner, none); ok {
		t.Errorf("a redirected call sent on again to %q", loc)
	}
	if loc, ok := ownerRedirect(r, meta.ErrTopicFenced, none); ok {
		t.Errorf("a plain fenced error redirected to %q", loc)
	}
	if loc, ok := ownerRedirect(r, nil, none); ok {
		t.Errorf("no error redirected to %q", loc)
	}
}

// Requirement (issue 28, advertised listeners' web service URLs): the
// redirect of a caller in a listener goes to the owner's URL in that
// listener (https first over TLS); a listener the owner names no web
// service URL for, or none, goes to the owner's admin URL.
func TestOwnerRedirectInTheCallersListener(t *testing.T) {
	notOwner := meta.NotOwnerError{OwnerAdminURL: "http://10.0.0.2:8080", Err: meta.ErrTopicFenced,
		OwnerHTTPListeners: meta.HTTPListeners{"external": {HTTP: "http://b2.example.com:80", HTTPS: "https://b2.example.com:443"}}}
	r := httptest.NewRequest("GET", "http://b1.example.com/admin/v2/persistent/t/n/x/stats", nil)
	tlsReq := httptest.NewRequest("GET", "https://b1.example.com/admin/v2/persistent/t/n/x/stats", nil)
	for _, c := range []struct {
		r        *http.Request
		listener string
		want     string
	}{
		{r, "external", "http://b2.example.com:80/admin/v2/persistent/t/n/x/stats?authoritative=true"},
		{tlsReq, "external", "https://b2.example.com:443/admin/v2/persistent/t/n/x/stats?authoritative=true"},
		{r, "internal", "http://10.0.0.2:8080/admin/v2/persistent/t/n/x/stats?authoritative=true"},
		{r, "", "http://10.0.0.2:8080/admin/v2/persistent/t/n/x/stats?authoritative=true"},
	} {
		if loc, ok := ownerRedirect(c.r, notOwner, func() string { return c.listener }); !ok || loc != c.want {
			t.Errorf("listener %q (tls %v): %q %v, want %q", c.listener, c.r.TLS != nil, loc, ok, c.want)
		}
	}
}
