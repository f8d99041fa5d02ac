package mledger

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"

	"github.com/meridian-mq/meridian/cluster"
	"github.com/meridian-mq/meridian/proto/mlpb"
	"google.golang.org/protobuf/proto"
)

// Properties: small named values the managed ledger's owner keeps with it
// (Pulsar's managed-ledger properties; the broker keeps the topic epoch of
// exclusive producers there), in a LedgerProperties record of their own
// beside the ledger list, written by the owner only (fenced as every
// record it writes), deleted with the managed ledger.

// propsKey is the key of the LedgerProperties record.
func propsKey(name string) string { return mlDir(name) + "properties" }

// ledgerProps is the properties' state; mu orders loads and writes.
type ledgerProps struct {
	mu     sync.Mutex
	loaded bool
	rev    int64 // mod revision of the record (0: none)
	values map[string]int64
}

// Property returns the property name, reading the record on first use.
func (ml *ManagedLedger) Property(ctx context.Context, name string) (int64, bool, error) {
	ml.props.mu.Lock()
	defer ml.props.mu.Unlock()
	if err := ml.loadPropsLocked(ctx); err != nil {
		return 0, false, err
	}
	v, ok := ml.props.values[name]
	return v, ok, nil
}

func (ml *ManagedLedger) loadPropsLocked(ctx context.Context) error {
	if ml.props.loaded {
		return nil
	}
	kv, err := ml.store.Get(ctx, propsKey(ml.name))
	switch {
	case errors.Is(err, cluster.ErrNotFound):
		ml.props.values, ml.props.rev = map[string]int64{}, 0
	case err != nil:
		return fmt.Errorf("mledger: %s: read properties: %w", ml.name, err)
	default:
		m := &mlpb.LedgerProperties{}
		if err := proto.Unmarshal(kv.Value, m); err != nil {
			return fmt.Errorf("mledger: record %s: %w", kv.Key, err)
		}
		if m.FormatVersion > FormatVersion {
			return fmt.Errorf("mledger: record %s has format version %d, this build knows up to %d", kv.Key, m.FormatVersion, FormatVersion)
		}
		ml.props.values, ml.props.rev = maps.Clone(m.Values), kv.ModRevision
		if ml.props.values == nil {
			ml.props.values = map[string]int64{}
		}
	}
	ml.props.loaded = true
	return nil
}

// SetProperty persists the property name = v; when it returns nil the
// value is durable. ErrFenced: another owner has the managed ledger.
func (ml *ManagedLedger) SetProperty(ctx context.Context, name string, v int64) error {
	ml.props.mu.Lock()
	defer ml.props.mu.Unlock()
	if err := ml.loadPropsLocked(ctx); err != nil {
		return err
	}
	if old, ok := ml.props.values[name]; ok && old == v {
		return nil
	}
	next := maps.Clone(ml.props.values)
	next[name] = v
	b, err := proto.Marshal(&mlpb.LedgerProperties{FormatVersion: FormatVersion, Values: next})
	if err != nil {
		return err
	}
	rev, err := ml.writeRecord(ctx, propsKey(ml.name), ml.props.rev, b, false)
	if err != nil {
		// The write's outcome may be unknown: read the record again next
		// time rather than trust this copy.
		ml.props.loaded = false
		return fmt.Errorf("mledger: %s: write properties: %w", ml.name, err)
	}
	ml.props.values, ml.props.rev = next, rev
	return nil
}
