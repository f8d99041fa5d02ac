// Package testutil holds helpers shared by Meridian's tests: free ports, an
// embedded etcd per test, and a harness for real OS processes.
package testutil

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/cluster"
)

// Ports are picked below the kernel's ephemeral range (Linux default
// 32768-60999), where outgoing connections of the processes under test
// cannot take them between planning and binding, and each is handed out
// once per test binary. Test binaries run one at a time for the process
// packages (make test-integration uses -p 1); each binary starts at a
// random offset.
const portLow, portHigh = 20000, 32000

var (
	portMu   sync.Mutex
	portUsed = map[int]bool{}
	portNext = portLow + rand.IntN(portHigh-portLow)
)

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	portMu.Lock()
	defer portMu.Unlock()
	for i := 0; i < portHigh-portLow; i++ {
		port := portNext
		portNext++
		if portNext >= portHigh {
			portNext = portLow
		}
		if portUsed[port] {
			continue
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue
		}
		l.Close()
		portUsed[port] = true
		return port
	}
	t.Fatal("no free port")
	return 0
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

// Store connects a cluster.Store with the given prefix to etcd at url; it
// closes with the test.
func Store(t testing.TB, url, prefix string) *cluster.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := cluster.Connect(ctx, cluster.StoreConfig{Endpoints: []string{url}, Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
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
