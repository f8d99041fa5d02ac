package cluster

import (
	"sync/atomic"

	"github.com/meridian-mq/meridian/internal/ratelog"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// quietZap is the logger handed to etcd's client and server: warnings and
// errors only, so etcd's chatter does not drown Meridian's own logs.
func quietZap() *zap.Logger { return zapAt(zap.ErrorLevel) }

func zapAt(level zapcore.Level) *zap.Logger {
	cfg := zap.NewProductionConfig()
	cfg.Level = zap.NewAtomicLevelAt(level)
	cfg.Encoding = "console"
	// Wall-clock times, to read beside Meridian's own lines; no stack
	// traces (etcd logs a few errors at start that are not faults).
	cfg.EncoderConfig.EncodeTime = zapcore.ISO8601TimeEncoder
	cfg.DisableStacktrace = true
	cfg.OutputPaths = []string{"stderr"}
	cfg.ErrorOutputPaths = []string{"stderr"}
	l, err := cfg.Build()
	if err != nil {
		return zap.NewNop()
	}
	return l
}

// serverZap is the embedded etcd server's logger: its warnings and errors
// — the ones that explain a request that timed out: "apply request took
// too long", "slow fdatasync", "leader failed to send out heartbeat on
// time", a lost peer — each message at most once per ratelog.DefaultEvery
// with the count held back, so a slow disk does not flood the log. Once
// quiet is set (an orderly Close) only fatal errors pass: etcd logs
// errors on every shutdown. Before, the server logged fatal errors only,
// and a CI run's "etcdserver: request timed out" left no trace of why.
func serverZap(quiet *atomic.Bool) *zap.Logger {
	base := zapAt(zap.WarnLevel)
	lim := &ratelog.Limiter{Every: ratelog.DefaultEvery}
	return base.WithOptions(zap.WrapCore(func(c zapcore.Core) zapcore.Core {
		return &limitedCore{Core: c, lim: lim, quiet: quiet}
	}))
}

// limitedCore passes each message (by its text) at most once per the
// limiter's interval, adding "suppressed" when some were held back.
type limitedCore struct {
	zapcore.Core
	lim   *ratelog.Limiter
	quiet *atomic.Bool
}

func (c *limitedCore) Enabled(l zapcore.Level) bool {
	if c.quiet.Load() && l < zapcore.FatalLevel {
		return false
	}
	return c.Core.Enabled(l)
}

func (c *limitedCore) With(fs []zapcore.Field) zapcore.Core {
	return &limitedCore{Core: c.Core.With(fs), lim: c.lim, quiet: c.quiet}
}

func (c *limitedCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

// startNoise: what every embedded member says when it starts about how
// Meridian configures it (one listener for gRPC and HTTP; etcd's default
// simple auth tokens): the same two lines in every log, never a cause.
var startNoise = map[string]bool{
	"Running http and grpc server on single port. This is not recommended for production.": true,
	"simple token is not cryptographically signed":                                         true,
}

func (c *limitedCore) Write(e zapcore.Entry, fs []zapcore.Field) error {
	if startNoise[e.Message] {
		return nil
	}
	if e.Level < zapcore.DPanicLevel {
		pass, suppressed := c.lim.Allow(e.LoggerName+"|"+e.Message, e.Time)
		if !pass {
			return nil
		}
		if suppressed > 0 {
			fs = append(fs, zap.Int("suppressed", suppressed))
		}
	}
	return c.Core.Write(e, fs)
}
