package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

// capture is a slog handler that keeps records.
type capture struct{ recs *[]string }

func (c capture) Enabled(context.Context, slog.Level) bool { return true }
func (c capture) Handle(_ context.Context, r slog.Record) error {
	s := r.Level.String() + " " + r.Message
	r.Attrs(func(a slog.Attr) bool { s += " " + a.String(); return true })
	*c.recs = append(*c.recs, s)
	return nil
}
func (c capture) WithAttrs([]slog.Attr) slog.Handler { return c }
func (c capture) WithGroup(string) slog.Handler      { return c }

func TestGossipLogLevelsAndRateLimit(t *testing.T) {
	var got []string
	g := newGossipLog(slog.New(capture{&got}))
	g.line("[INFO] serf: EventMemberJoin: a 127.0.0.1", t0)
	g.line("[DEBUG] memberlist: Stream connection from=127.0.0.1:1", t0)
	g.line("[WARN] memberlist: Refuting a suspect message (from: b)", t0)
	for i := range 5 {
		g.line(fmt.Sprintf("[ERR] memberlist: Decrypt packet failed: no key from=127.0.0.1:%d", i), at(time.Duration(i)*time.Second))
	}
	g.line("[ERR] memberlist: Decrypt packet failed: no key from=127.0.0.1:9", at(11*time.Second))
	g.line("no prefix at all", t0)
	want := []string{
		"DEBUG EventMemberJoin: a 127.0.0.1 component=serf",
		"DEBUG Stream connection from=127.0.0.1:1 component=memberlist",
		"WARN Refuting a suspect message (from: b) component=memberlist",
		"ERROR Decrypt packet failed: no key from=127.0.0.1:0 component=memberlist",
		"ERROR Decrypt packet failed: no key from=127.0.0.1:9 component=memberlist suppressed=4",
		"DEBUG no prefix at all component=gossip",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// At Info, serf's INFO chatter is dropped before any work.
	got = nil
	g = newGossipLog(slog.New(slog.NewTextHandler(&strings.Builder{}, &slog.HandlerOptions{Level: slog.LevelInfo})))
	g.line("[INFO] serf: EventMemberJoin: a", t0)
	if g.lim.Keys() != 0 {
		t.Fatal("INFO line was considered at Info level")
	}
}

// The global store's endpoints name their regions; the store avoids the
// members of unreachable regions, never all of them, and uses them again
// when their region is back.
func TestStoreEndpointsAvoidRegions(t *testing.T) {
	eps := parseEndpoints([]string{"east=http://e:2379", "west=http://w:2379", "http://witness:2379"})
	if got := urls(eps); !slices.Equal(got, []string{"http://e:2379", "http://w:2379", "http://witness:2379"}) {
		t.Fatalf("urls %v", got)
	}
	for _, tc := range []struct {
		avoid []string
		want  []string
	}{
		{nil, []string{"http://e:2379", "http://w:2379", "http://witness:2379"}},
		{[]string{"east"}, []string{"http://w:2379", "http://witness:2379"}},
		{[]string{"east", "west"}, []string{"http://witness:2379"}},
		{[]string{"north"}, []string{"http://e:2379", "http://w:2379", "http://witness:2379"}},
	} {
		if got := usable(eps, tc.avoid); !slices.Equal(got, tc.want) {
			t.Errorf("avoid %v: %v, want %v", tc.avoid, got, tc.want)
		}
	}
	// Every member named and every region avoided: all of them, not none.
	named := parseEndpoints([]string{"east=http://e:2379", "west=http://w:2379"})
	if got := usable(named, []string{"east", "west"}); len(got) != 2 {
		t.Errorf("every region avoided: %v, want both", got)
	}
}
