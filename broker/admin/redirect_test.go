package admin

import (
	"errors"
	"fmt"
	"net/http/httptest"
	"testing"

	"github.com/meridian-mq/meridian/broker/meta"
)

// A topic's call on a broker that does not own the topic goes to the
// owner with the same path and query and authoritative=true; a call that
// already was redirected, or another error, is not redirected.
func TestOwnerRedirect(t *testing.T) {
	notOwner := meta.NotOwnerError{OwnerAdminURL: "http://10.0.0.2:8080", Err: fmt.Errorf("%w: owned by b2", meta.ErrTopicFenced)}
	r := httptest.NewRequest("GET", "http://10.0.0.1:8080/admin/v2/persistent/t/n/x/stats?getPreciseBacklog=true", nil)
	loc, ok := ownerRedirect(r, fmt.Errorf("loading: %w", notOwner))
	if want := "http://10.0.0.2:8080/admin/v2/persistent/t/n/x/stats?authoritative=true&getPreciseBacklog=true"; !ok || loc != want {
		t.Errorf("%q %v, want %q", loc, ok, want)
	}
	if !errors.Is(notOwner, meta.ErrTopicFenced) {
		t.Error("NotOwnerError does not wrap ErrTopicFenced")
	}
	again := httptest.NewRequest("GET", "http://10.0.0.2:8080/admin/v2/persistent/t/n/x/stats?authoritative=true", nil)
	if loc, ok := ownerRedirect(again, notOwner); ok {
		t.Errorf("a redirected call sent on again to %q", loc)
	}
	if loc, ok := ownerRedirect(r, meta.ErrTopicFenced); ok {
		t.Errorf("a plain fenced error redirected to %q", loc)
	}
	if loc, ok := ownerRedirect(r, nil); ok {
		t.Errorf("no error redirected to %q", loc)
	}
}
