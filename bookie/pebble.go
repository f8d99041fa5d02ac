package bookie

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// markCorruption marks Pebble corruption errors with ErrCorrupt, so a
// damaged table is never taken for an absent entry.
func markCorruption(err error) error {
	if err != nil && pebble.IsCorruptionError(err) && !errors.Is(err, ErrCorrupt) {
		return errors.Join(ErrCorrupt, err)
	}
	return err
}

// pebbleOptions are the Pebble options of a bookie store.
func pebbleOptions(fs vfs.FS, memTableSizeBytes int, mustExist bool, log *slog.Logger) *pebble.Options {
	o := &pebble.Options{
		FS:               fs,
		ErrorIfNotExists: mustExist,
		Logger:           pebbleLogger{log},
		// Pebble's own event log (flushes, compactions, WAL rotations,
		// write stalls) goes to debug through pebbleLogger.Infof.
		EventListener: teeLogging(log, pebble.EventListener{
			// Pebble's default is Fatalf. A bookie reports corruption to the
			// reader (CORRUPT) and keeps serving the rest.
			DataCorruption: func(info pebble.DataCorruptionInfo) {
				log.Error("pebble: on-disk corruption", "path", info.Path, "err", errString(info.Details))
			},
			BackgroundError: func(err error) {
				log.Error("pebble: background error", "err", errString(err))
			},
			DiskSlow: func(info pebble.DiskSlowInfo) {
				log.Warn("pebble: slow disk write", "path", info.Path, "op", info.OpType.String(), "duration", info.Duration)
			},
		}),
	}
	if memTableSizeBytes > 0 {
		o.MemTableSize = uint64(memTableSizeBytes)
	}
	// Tables are not compressed. They hold only the index now (entries are
	// in the entry log), a few dozen bytes per entry; when they held the
	// entries, snappy at every flush and compaction was CPU on the machine
	// that serves adds and stalled them (docs/performance.md).
	o.ApplyCompressionSettings(func() pebble.DBCompressionSettings { return pebble.DBCompressionNone })
	return o
}

// teeLogging adds Pebble's logging event listener (its informational
// events, to debug) to l; l alone reports errors and slow disks.
func teeLogging(log *slog.Logger, l pebble.EventListener) *pebble.EventListener {
	info := pebble.MakeLoggingEventListener(pebbleLogger{log})
	info.BackgroundError, info.DataCorruption, info.DiskSlow = nil, nil, nil
	t := pebble.TeeEventListener(info, l)
	return &t
}

// errString is err's one-line message (cockroachdb/errors values print
// their stack traces with %+v, which slog may use).
func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// pebbleLogger routes Pebble's logs to slog. Pebble's informational lines
// (flushes, compactions, WAL recovery) go to debug.
type pebbleLogger struct{ l *slog.Logger }

func (p pebbleLogger) Infof(format string, args ...any) {
	p.l.Debug("pebble: " + fmt.Sprintf(format, args...))
}

func (p pebbleLogger) Errorf(format string, args ...any) {
	p.l.Error("pebble: " + fmt.Sprintf(format, args...))
}

// Fatalf is called by Pebble on unrecoverable errors; Pebble expects it not
// to return. It panics with a pebbleFatal, which commitBatch turns back into
// an error when it comes from a commit (a failed WAL write or fsync): the
// store then stops writing but keeps serving reads. Anywhere else the panic
// ends the process, as Pebble intends.
func (p pebbleLogger) Fatalf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	p.l.Error("pebble: fatal: " + msg)
	panic(pebbleFatal{msg})
}

type pebbleFatal struct{ msg string }

func (f pebbleFatal) Error() string { return "pebble: " + f.msg }

// commitBatch commits b. Pebble reports a failed WAL write or sync through
// Logger.Fatalf (see pebbleLogger); after the first such failure the
// committer never commits again, and reads do not use the commit pipeline.
func commitBatch(b *pebble.Batch, o *pebble.WriteOptions) (err error) {
	defer func() {
		if r := recover(); r != nil {
			f, ok := r.(pebbleFatal)
			if !ok {
				panic(r)
			}
			err = f
		}
	}()
	return b.Commit(o)
}
