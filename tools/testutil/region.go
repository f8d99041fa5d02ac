package testutil

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/cluster"
)

// BookieProc is a bookie running as its own OS process (`meridian bookie`).
type BookieProc struct {
	*Proc
	ID, Rack, Addr, DataDir string
}

// Region is a test region: a real embedded etcd (in the test process) and
// bookie processes registered in it under RegionPrefix(name).
type Region struct {
	Name    string
	EtcdURL string
	Store   *cluster.Store
	Bookies []*BookieProc
	t       testing.TB
}

// RegionPrefix is the etcd prefix `meridian bookie --region NAME` uses.
func RegionPrefix(name string) string { return "/meridian/regions/" + name }

// StartRegion starts etcd and one bookie process per entry of racks (the
// bookie's rack label), waiting until all are registered.
func StartRegion(t testing.TB, name string, racks ...string) *Region {
	t.Helper()
	return StartRegionOn(t, name, StartEtcd(t), racks...)
}

// StartRegionOn is StartRegion on the etcd already serving at url (e.g.
// StartEtcdProc's, which a test can stop).
func StartRegionOn(t testing.TB, name, url string, racks ...string) *Region {
	t.Helper()
	r := &Region{Name: name, EtcdURL: url, Store: Store(t, url, RegionPrefix(name)), t: t}
	for i, rk := range racks {
		r.AddBookie(fmt.Sprintf("%s-bookie-%d", name, i+1), rk)
	}
	r.WaitBookies(len(racks))
	return r
}

// AddBookie starts one more bookie process, with extra flags.
func (r *Region) AddBookie(id, rack string, extra ...string) *BookieProc {
	r.t.Helper()
	addr := FreeAddr(r.t)
	dir := filepath.Join(r.t.TempDir(), id)
	// Every listener on a port of its own: the defaults (3181, 8000) are
	// one bookie's per host.
	args := append([]string{"bookie", "--region", r.Name, "--etcd", r.EtcdURL, "--id", id, "--rack", rack,
		"--listen", addr, "--metrics", FreeAddr(r.t), "--data-dir", dir, "--log-level", "warn"}, extra...)
	p := StartProc(r.t, id, MeridianBinary(r.t), args...)
	b := &BookieProc{Proc: p, ID: id, Rack: rack, Addr: addr, DataDir: dir}
	r.Bookies = append(r.Bookies, b)
	return b
}

// Restart kill -9s the bookie (if running) and starts it again on the same
// address and data directory, waiting until it accepts connections.
func (b *BookieProc) Restart() {
	b.Proc.t.Helper()
	b.Proc.Restart()
	WaitListening(b.Proc.t, b.Addr, 60*time.Second)
}

// Bookie returns the bookie process with the given id.
func (r *Region) Bookie(id string) *BookieProc {
	for _, b := range r.Bookies {
		if b.ID == id {
			return b
		}
	}
	r.t.Fatalf("no bookie %s", id)
	return nil
}

// WaitBookies waits until n bookies are registered writable.
func (r *Region) WaitBookies(n int) {
	r.t.Helper()
	Eventually(r.t, 60*time.Second, fmt.Sprintf("%d writable bookies", n), func() bool {
		kvs, _, err := r.Store.List(context.Background(), "/bookies/writable/")
		return err == nil && len(kvs) >= n
	})
}

// WaitRegistered waits until the bookie with id is registered writable.
func (r *Region) WaitRegistered(id string) {
	r.t.Helper()
	Eventually(r.t, 60*time.Second, id+" registered", func() bool {
		_, err := r.Store.Get(context.Background(), "/bookies/writable/"+id)
		return err == nil
	})
}

// BrokerProc is a broker running as its own OS process (`meridian broker`).
type BrokerProc struct {
	*Proc
	ID, Addr, AdminAddr string
}

// URL returns the broker's pulsar:// URL.
func (b *BrokerProc) URL() string { return "pulsar://" + b.Addr }

// AdminURL returns the broker's admin URL.
func (b *BrokerProc) AdminURL() string { return "http://" + b.AdminAddr }

// AddBroker starts a broker process in the region and waits until its
// admin API answers.
func (r *Region) AddBroker(id string, extra ...string) *BrokerProc {
	r.t.Helper()
	return r.AddBrokerAt(id, FreeAddr(r.t), extra...)
}

// AddBrokerAt is AddBroker with the Pulsar listener on addr (a test that
// names it in other flags, e.g. --advertised-listeners, plans it first).
func (r *Region) AddBrokerAt(id, addr string, extra ...string) *BrokerProc {
	r.t.Helper()
	admin := FreeAddr(r.t)
	// Every listener on a port of its own (the defaults, 6650, 8080 and
	// 6660, are one broker's per host); a test's --replication-listen in
	// extra comes later and wins. No load balancer to wait for: a SIGTERM
	// hands over at once unless the test's --shutdown-drain-delay says.
	args := append([]string{"broker", "--region", r.Name, "--etcd", r.EtcdURL, "--id", id,
		"--listen", addr, "--admin", admin, "--replication-listen", FreeAddr(r.t), "--log-level", "warn",
		"--shutdown-drain-delay", "0s"}, extra...)
	p := StartProc(r.t, id, MeridianBinary(r.t), args...)
	b := &BrokerProc{Proc: p, ID: id, Addr: addr, AdminAddr: admin}
	WaitHTTP(r.t, b.AdminURL()+"/admin/v2/tenants", 60*time.Second)
	return b
}

// WaitHTTP waits until GET url answers 200.
func WaitHTTP(t testing.TB, url string, timeout time.Duration) {
	t.Helper()
	Eventually(t, timeout, url, func() bool {
		resp, err := http.Get(url)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
}
