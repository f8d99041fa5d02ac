package cluster

import (
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// quietZap is the logger handed to etcd's client and server: warnings and
// errors only, so etcd's chatter does not drown Meridian's own logs.
func quietZap() *zap.Logger { return zapAt(zap.ErrorLevel) }

// silentZap is for the embedded etcd server, which logs errors on every
// orderly shutdown; its fatal errors reach the caller through Etcd.Err.
func silentZap() *zap.Logger { return zapAt(zap.FatalLevel) }

func zapAt(level zapcore.Level) *zap.Logger {
	cfg := zap.NewProductionConfig()
	cfg.Level = zap.NewAtomicLevelAt(level)
	cfg.Encoding = "console"
	cfg.OutputPaths = []string{"stderr"}
	cfg.ErrorOutputPaths = []string{"stderr"}
	l, err := cfg.Build()
	if err != nil {
		return zap.NewNop()
	}
	return l
}
