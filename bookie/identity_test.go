package bookie

import (
	"errors"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/meridian-mq/meridian/proto/metapb"
)

func TestDecideIdentity(t *testing.T) {
	a := &metapb.Cookie{BookieId: "b1", InstanceId: "i-a"}
	b := &metapb.Cookie{BookieId: "b1", InstanceId: "i-b"}
	other := &metapb.Cookie{BookieId: "b2", InstanceId: "i-a"}
	for _, tc := range []struct {
		name         string
		disk         *metapb.Cookie
		hasData      bool
		withRegistry bool
		meta         *metapb.Cookie
		want         identityAction
		wantErr      bool
	}{
		{name: "new bookie, no registry", want: identityFormatNew},
		{name: "restart, no registry", disk: a, hasData: true, want: identityStart},
		{name: "new bookie", withRegistry: true, want: identityFormatNew},
		{name: "wiped disk", withRegistry: true, meta: a, want: identityFormatWiped},
		{name: "matching", disk: a, hasData: true, withRegistry: true, meta: a, want: identityStart},
		{name: "metadata lost the cookie", disk: a, withRegistry: true, want: identityRepublish},
		{name: "disk swapped", disk: a, hasData: true, withRegistry: true, meta: b, wantErr: true},
		{name: "another bookie's disk", disk: other, withRegistry: true, meta: a, wantErr: true},
		{name: "another bookie's disk, no registry", disk: other, wantErr: true},
		{name: "data without cookie", hasData: true, withRegistry: true, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := decideIdentity("b1", tc.disk, tc.hasData, tc.withRegistry, tc.meta)
			if tc.wantErr {
				if !errors.Is(err, ErrIdentity) {
					t.Fatalf("got %v, %v; want ErrIdentity", got, err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

// A bookie that never had a cookie is new, even in a cluster that already
// allocated ledgers: it never held their data, so nothing is in limbo.
func TestNewBookieInUsedClusterHasNoLimbo(t *testing.T) {
	reg := newFakeRegistry()
	reg.highWater = 50
	cfg := testConfig(t, "/data")
	cfg.fs = vfs.NewMem()
	s, err := New(cfg, reg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.Cookie().GetLimboBelowOrAt() != 0 {
		t.Fatalf("new bookie limbo = %d", s.Cookie().GetLimboBelowOrAt())
	}
	if reg.cookie("bookie-1").GetInstanceId() != s.Cookie().GetInstanceId() {
		t.Fatal("cookie not published")
	}
	if _, _, _, err := s.Store().Read(5, 0); !errors.Is(err, ErrNoSuchLedger) {
		t.Fatalf("read on a new bookie: %v", err)
	}
}

// Requirement: a data directory whose instance differs from the one in
// metadata (a swapped or copied disk) is refused; a matching one starts; a
// cookie missing from metadata is restored from disk.
func TestIdentityAcrossRestarts(t *testing.T) {
	reg := newFakeRegistry()
	mem := vfs.NewMem()
	cfg := testConfig(t, "/data")
	cfg.fs = mem
	s, err := New(cfg, reg)
	if err != nil {
		t.Fatal(err)
	}
	inst := s.Cookie().GetInstanceId()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s, err = New(cfg, reg)
	if err != nil {
		t.Fatalf("restart with matching cookies: %v", err)
	}
	if s.Cookie().GetInstanceId() != inst {
		t.Fatal("restart changed the instance id")
	}
	s.Close()

	delete(reg.cookies, "bookie-1")
	s, err = New(cfg, reg)
	if err != nil {
		t.Fatalf("restart with the metadata cookie lost: %v", err)
	}
	s.Close()
	if reg.cookie("bookie-1").GetInstanceId() != inst {
		t.Fatal("disk cookie not republished")
	}

	reg.cookies["bookie-1"].InstanceId = "someone-else"
	if _, err := New(cfg, reg); !errors.Is(err, ErrIdentity) {
		t.Fatalf("swapped disk: %v, want ErrIdentity", err)
	}

	// The same data dir under another bookie id is refused even without etcd.
	cfg.ID = "bookie-2"
	if _, err := New(cfg, nil); !errors.Is(err, ErrIdentity) {
		t.Fatalf("data dir of bookie-1 used as bookie-2: %v", err)
	}
}
