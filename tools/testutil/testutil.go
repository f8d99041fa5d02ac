// Package testutil holds helpers shared by Meridian's tests: free ports, an
// embedded etcd per test, and a harness for real OS processes.
package testutil

import (
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/cluster"
	"github.com/meridian-mq/meridian/internal/ports"
)

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago and
// that no other test binary or planner on this machine holds (package
// ports).
func FreePort(t testing.TB) int {
	t.Helper()
	addr, err := ports.Free("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	_, p, _ := net.SplitHostPort(addr)
	port, _ := strconv.Atoi(p)
	return port
}

// FreeAddr returns "127.0.0.1:PORT" with a free port.
func FreeAddr(t testing.TB) string {
	return fmt.Sprintf("127.0.0.1:%d", FreePort(t))
}

// StartEtcd starts a real embedded etcd for the test and returns its client
// URL; it stops with the test.
func StartEtcd(t testing.TB) string {
	t.Helper()
	e, err := cluster.StartEtcd(cluster.EtcdConfig{
		Name:      "test",
		DataDir:   t.TempDir(),
		ClientURL: "http://" + FreeAddr(t),
		PeerURL:   "http://" + FreeAddr(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	return e.ClientURL()
}

// StartEtcdProc starts etcd as its own process (`meridian etcd`), so the
// test can pause (SIGSTOP) or kill it, and returns it and its client URL
// once it answers.
func StartEtcdProc(t testing.TB, name string) (*Proc, string) {
	t.Helper()
	client, peer := FreeAddr(t), FreeAddr(t)
	p := StartProc(t, name, MeridianBinary(t), "etcd", "--name", name, "--data-dir", filepath.Join(t.TempDir(), name),
		"--client-url", "http://"+client, "--peer-url", "http://"+peer)
	WaitHTTP(t, "http://"+client+"/health", 60*time.Second)
	return p, "http://" + client
}

// Store connects a cluster.Store with the given prefix to etcd at url; it
// closes with the test.
func Store(t testing.TB, url, prefix string) *cluster.Store {
	t.Helper()
	return StoreWith(t, url, prefix)
}

// Eventually polls cond every 20ms until it holds or timeout passes. For
// integration tests against real processes only; unit tests use fake clocks.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
