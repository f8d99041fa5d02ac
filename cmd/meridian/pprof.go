package main

import (
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"path/filepath"
	"strconv"

	"github.com/meridian-mq/meridian/internal/httpserve"
)

// pprofDirEnv names a directory: when it is set, every meridian process
// serves net/http/pprof on a free 127.0.0.1 port and writes that address
// into DIR/PID.addr, so a benchmark (meridian bench) can take CPU and
// allocation profiles of the broker and bookie processes it started
// (children inherit the variable). Off when unset: nothing listens.
const pprofDirEnv = "MERIDIAN_PPROF_DIR"

// startPprof starts the profiling listener if MERIDIAN_PPROF_DIR is set.
// A failure is reported on stderr and otherwise ignored: profiling is a
// benchmark aid, never a reason not to serve.
func startPprof() {
	dir := os.Getenv(pprofDirEnv)
	if dir == "" {
		return
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, "meridian: pprof listener:", err)
		return
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	// No /debug/pprof/cmdline: the command line holds flags' values,
	// which may be secrets (--token).
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	// A CPU profile or trace streams for as long as ?seconds= asks: no
	// write timeout on this listener.
	srv := httpserve.New(mux, httpserve.Options{WriteTimeout: -1})
	go func() { _ = srv.Serve(l) }()
	f := filepath.Join(dir, strconv.Itoa(os.Getpid())+".addr")
	if err := os.WriteFile(f, []byte(l.Addr().String()), 0o600); err != nil {
		fmt.Fprintln(os.Stderr, "meridian: pprof address file:", err)
	}
}
