package bookie

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/meridian-mq/meridian/proto/metapb"
)

// Registry is the bookie's view of cluster metadata. Implementations must be safe for concurrent use.
//
// An error from any method means the metadata store could not be reached or
// refused the operation; at startup the bookie then refuses to start (it
// cannot check its identity), while running it logs and retries the
// registration.
type Registry interface {
	// GetCookie returns the cookie stored in metadata for bookieID; found=false if none.
	GetCookie(ctx context.Context, bookieID string) (c *metapb.Cookie, found bool, err error)
	// PutCookie stores the cookie (overwrites).
	PutCookie(ctx context.Context, c *metapb.Cookie) error
	// LedgerIDHighWater returns an upper bound of every ledger id allocated
	// so far by any allocator that can place a ledger on this bookie (the
	// region's store and, multi-region, the global store). It must not
	// return a value below one of them: an error instead.
	LedgerIDHighWater(ctx context.Context) (int64, error)
	// Register publishes the registration under a lease kept alive until ctx is done or Deregister; calling it again updates it (e.g. read-only).
	Register(ctx context.Context, reg *metapb.BookieRegistration) error
	Deregister(ctx context.Context) error
}

// ErrIdentity is returned when the data directory and the cluster metadata
// disagree about who this bookie is (a swapped disk, a copied directory, a
// bookie id reused). The bookie refuses to start: serving would risk
// answering "no such entry" for entries another instance acknowledged.
var ErrIdentity = errors.New("bookie: identity mismatch")

// identityAction is what startup does, decided by decideIdentity.
type identityAction int

const (
	// identityStart: the disk cookie is valid; start with it.
	identityStart identityAction = iota
	// identityFormatNew: nothing anywhere: a new bookie; limbo 0.
	identityFormatNew
	// identityFormatWiped: metadata knows this bookie but its disk is empty:
	// the disk was wiped; format with a new instance id and put every ledger
	// allocated so far in limbo.
	identityFormatWiped
	// identityRepublish: the disk has a cookie but metadata has none (it was
	// lost, or a previous start crashed between the two writes): put the
	// disk cookie back in metadata.
	identityRepublish
)

// decideIdentity is the pure core of the startup identity check.
//   - disk: the cookie in the data directory, nil if none;
//   - diskHasData: the data directory holds ledger data;
//   - meta: the cookie in metadata, nil if none or if running without a
//     registry (then withRegistry is false).
func decideIdentity(bookieID string, disk *metapb.Cookie, diskHasData bool, withRegistry bool, meta *metapb.Cookie) (identityAction, error) {
	if disk == nil && diskHasData {
		return 0, fmt.Errorf("%w: data dir holds ledger data but no cookie; refusing to guess its identity", ErrIdentity)
	}
	if disk != nil && disk.GetBookieId() != bookieID {
		return 0, fmt.Errorf("%w: data dir belongs to bookie %q (instance %s), this bookie is %q",
			ErrIdentity, disk.GetBookieId(), disk.GetInstanceId(), bookieID)
	}
	switch {
	case !withRegistry && disk == nil:
		return identityFormatNew, nil
	case !withRegistry:
		return identityStart, nil
	case disk == nil && meta == nil:
		return identityFormatNew, nil
	case disk == nil:
		return identityFormatWiped, nil
	case meta == nil:
		return identityRepublish, nil
	case meta.GetInstanceId() != disk.GetInstanceId():
		return 0, fmt.Errorf("%w: data dir has instance %s but metadata records instance %s for bookie %q "+
			"(disk swapped or copied from another bookie?); refusing to start",
			ErrIdentity, disk.GetInstanceId(), meta.GetInstanceId(), bookieID)
	default:
		return identityStart, nil
	}
}

// ensureIdentity runs the startup identity check against the store and the
// registry (nil: no metadata, the cookie lives on disk only) and returns the
// cookie the bookie runs with.
//
// Writes go to the registry first, then to disk: a crash between them leaves
// "cookie in metadata, none on disk", which the next start takes for a wiped
// disk and formats again with limbo (safe), never "disk and metadata
// disagree" (which would refuse to start).
func ensureIdentity(ctx context.Context, st *Store, bookieID string, reg Registry, log *slog.Logger, now time.Time) (*metapb.Cookie, error) {
	disk, _ := st.Cookie()
	hasData, err := st.hasLedgerData()
	if err != nil {
		return nil, fmt.Errorf("bookie: inspect data dir: %w", err)
	}
	var meta *metapb.Cookie
	if reg != nil {
		c, found, err := reg.GetCookie(ctx, bookieID)
		if err != nil {
			return nil, fmt.Errorf("bookie: read cookie of %q from metadata: %w", bookieID, err)
		}
		if found {
			meta = c
		}
	}
	action, err := decideIdentity(bookieID, disk, hasData, reg != nil, meta)
	if err != nil {
		return nil, err
	}
	switch action {
	case identityStart:
		return disk, nil
	case identityRepublish:
		log.Warn("bookie: metadata has no cookie for this bookie; publishing the data dir's cookie",
			"bookie", bookieID, "instance", disk.GetInstanceId())
		if err := reg.PutCookie(ctx, disk); err != nil {
			return nil, fmt.Errorf("bookie: publish cookie: %w", err)
		}
		return disk, nil
	case identityFormatNew:
		c := &metapb.Cookie{BookieId: bookieID, InstanceId: newInstanceID(), CreatedMs: now.UnixMilli()}
		if reg != nil {
			if err := reg.PutCookie(ctx, c); err != nil {
				return nil, fmt.Errorf("bookie: publish cookie: %w", err)
			}
		}
		if err := st.SetCookie(c); err != nil {
			return nil, err
		}
		log.Info("bookie: formatted new data dir", "bookie", bookieID, "instance", c.GetInstanceId())
		return c, nil
	case identityFormatWiped:
		hw, err := reg.LedgerIDHighWater(ctx)
		if err != nil {
			return nil, fmt.Errorf("bookie: data dir was wiped; read ledger id high water: %w", err)
		}
		limbo := max(hw, meta.GetLimboBelowOrAt())
		c := &metapb.Cookie{BookieId: bookieID, InstanceId: newInstanceID(), LimboBelowOrAt: limbo, CreatedMs: now.UnixMilli()}
		if err := reg.PutCookie(ctx, c); err != nil {
			return nil, fmt.Errorf("bookie: publish cookie: %w", err)
		}
		if err := st.SetCookie(c); err != nil {
			return nil, err
		}
		log.Warn("bookie: data dir is empty but metadata knows this bookie: the disk was wiped; "+
			"formatted anew, ledgers up to the high water are in limbo (answers UNKNOWN, never no-such-entry)",
			"bookie", bookieID, "old_instance", meta.GetInstanceId(), "instance", c.GetInstanceId(), "limbo_below_or_at", limbo)
		return c, nil
	}
	panic(fmt.Sprintf("bookie: unhandled identity action %d", action))
}

func newInstanceID() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(fmt.Sprintf("bookie: crypto/rand: %v", err))
	}
	return hex.EncodeToString(b[:])
}
