package ledger

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/meridian-mq/meridian/proto/metapb"
	"github.com/meridian-mq/meridian/rack"
)

// readOnlyBookies is a BookieSource whose bookies are all registered
// read-only: none writable.
type readOnlyBookies struct{ ids []string }

func (s readOnlyBookies) Writable() []*metapb.BookieRegistration { return nil }

func (s readOnlyBookies) Lookup(id string) (*metapb.BookieRegistration, bool) {
	return &metapb.BookieRegistration{Id: id, ReadOnly: true}, true
}

func (s readOnlyBookies) ReadOnly() []*metapb.BookieRegistration {
	out := make([]*metapb.BookieRegistration, len(s.ids))
	for i, id := range s.ids {
		out[i] = &metapb.BookieRegistration{Id: id, Region: "east", Rack: "r1", ReadOnly: true}
	}
	return out
}

// Issue 28: with every bookie read-only, ledger creation said "0 usable (0
// live)", as if no bookie ran: the client passes only writable bookies to
// rack.Place. It counts the read-only ones now.
func TestNotEnoughBookiesCountsReadOnlyOnes(t *testing.T) {
	c := &Client{cfg: Config{Bookies: readOnlyBookies{ids: []string{"b1", "b2", "b3", "b4"}}}, rng: rand.New(rand.NewPCG(1, 2))}
	_, err := c.Create(context.Background(), CreateOptions{EnsembleSize: 3, WriteQuorum: 3, AckQuorum: 2, Placement: rack.DefaultPolicy()})
	if !errors.Is(err, ErrNotEnoughBookies) {
		t.Fatalf("create with every bookie read-only: %v, want ErrNotEnoughBookies", err)
	}
	if want := "0 usable (4 live, 4 read-only)"; !strings.Contains(err.Error(), want) {
		t.Fatalf("error %q does not say %q", err, want)
	}
}
