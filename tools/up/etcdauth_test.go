package up

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/cluster"
	"github.com/meridian-mq/meridian/internal/tlsutil"
	"github.com/meridian-mq/meridian/tools/testutil"
)

// enableAuth on a real etcd over mutual TLS: a user reads and writes with
// its certificate, a certificate of the same CA with another name is
// refused; run again with one more user (an `up` on the same directory
// after a process was added), it succeeds and the new user is served.
func TestEnableAuthIdempotent(t *testing.T) {
	dir := t.TempDir()
	leaves := map[string]tlsutil.Leaf{}
	for _, n := range []string{"etcd", "client", "east-broker-1", "east-broker-2", "stranger"} {
		leaves[n] = tlsutil.LocalLeaf(n, "")
	}
	files, err := tlsutil.LocalPKI(filepath.Join(dir, "tls"), leaves)
	if err != nil {
		t.Fatal(err)
	}
	e, err := cluster.StartEtcd(cluster.EtcdConfig{Name: "etcd", DataDir: filepath.Join(dir, "etcd"),
		ClientURL: "https://" + testutil.FreeAddr(t), PeerURL: "https://" + testutil.FreeAddr(t), TLS: files["etcd"]})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	get := func(name string) error {
		src, err := tlsutil.NewSource(files[name])
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s, err := cluster.Connect(ctx, cluster.StoreConfig{Endpoints: []string{e.ClientURL()}, Prefix: "/m", TLS: src.ClientConfig("")})
		if err != nil {
			return err
		}
		defer s.Close()
		_, err = s.Put(ctx, "/k/"+name, []byte("v"))
		return err
	}
	client, err := tlsutil.NewSource(files["client"])
	if err != nil {
		t.Fatal(err)
	}
	c := etcdCluster{name: "test", urls: []string{e.ClientURL()}, users: map[string]string{"root": "root", "client": "root", "east-broker-1": EtcdRole}}
	if err := enableAuth(context.Background(), c, client); err != nil {
		t.Fatal(err)
	}
	if err := get("east-broker-1"); err != nil {
		t.Fatalf("a user: %v", err)
	}
	for _, n := range []string{"stranger", "east-broker-2"} {
		if err := get(n); err == nil || !strings.Contains(err.Error(), "permission denied") {
			t.Fatalf("%s (no user): %v, want permission denied", n, err)
		}
	}
	c.users["east-broker-2"] = EtcdRole
	if err := enableAuth(context.Background(), c, client); err != nil {
		t.Fatalf("again, with a user more: %v", err)
	}
	if err := get("east-broker-2"); err != nil {
		t.Fatalf("the user added by the second run: %v", err)
	}
	if err := get("stranger"); err == nil {
		t.Fatal("stranger served after the second run")
	}
}
