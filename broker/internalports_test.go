package broker_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meridian-mq/meridian/cluster"
	"github.com/meridian-mq/meridian/internal/tlsutil"
	"github.com/meridian-mq/meridian/proto/bookiepb"
	"github.com/meridian-mq/meridian/proto/replpb"
	"github.com/meridian-mq/meridian/tools/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// Security issue test 3: with token authentication on (which needs TLS),
// a real standalone's internal ports — its bookie's gRPC port, the
// replication port and the embedded etcd — authenticate their callers by
// certificate and role, over real gRPC on TCP. A caller without
// credentials (plaintext, or TLS without a client certificate) is not
// served; a user's certificate from the deployment's own CA (one the
// Pulsar listener's "tls" authentication takes as role "alice") may ask
// a bookie for its disk usage but may not read, add or fence (ReadLac),
// may not open the replication service and is refused by etcd; a
// bookie's certificate of the region may not speak for the region on
// the replication port; the standalone's own certificate (every role) is
// served everywhere.
func TestInternalPortsAuthenticateCallers(t *testing.T) {
	bookieAddr, replAddr, etcdAddr := testutil.FreeAddr(t), testutil.FreeAddr(t), testutil.FreeAddr(t)
	_, bookiePort, _ := net.SplitHostPort(bookieAddr)
	s := testutil.StartSecureStandalone(t, t.TempDir(), "--bookies", "1", "--bookie-base-port", bookiePort,
		"--replication-listen", replAddr, "--etcd-client-url", "http://"+etcdAddr)

	dir := filepath.Join(s.DataDir, "tls")
	ca, err := tlsutil.LoadCA(s.CAFile, filepath.Join(dir, "ca-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	odir := t.TempDir()
	alice, err := ca.IssueFiles(odir, "alice", s.CAFile, tlsutil.LocalLeaf("alice", ""))
	if err != nil {
		t.Fatal(err)
	}
	bookieCert, err := ca.IssueFiles(odir, "a-bookie", s.CAFile, tlsutil.LocalLeaf("a-bookie", "standalone", tlsutil.RoleBookie))
	if err != nil {
		t.Fatal(err)
	}
	own := tlsutil.Files{CertFile: filepath.Join(dir, "standalone.pem"), KeyFile: filepath.Join(dir, "standalone-key.pem"), CAFile: s.CAFile}

	caPEM, err := os.ReadFile(s.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	type caller struct {
		name  string
		creds credentials.TransportCredentials
	}
	withCert := func(f tlsutil.Files) credentials.TransportCredentials {
		src, err := tlsutil.NewSource(f)
		if err != nil {
			t.Fatal(err)
		}
		return src.GRPCClient()
	}
	plain := caller{"plaintext", insecure.NewCredentials()}
	noCert := caller{"TLS without a client certificate", credentials.NewTLS(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12})}
	user := caller{"a user's certificate of the CA", withCert(alice)}
	bookieRole := caller{"a bookie's certificate of the region", withCert(bookieCert)}
	self := caller{"the standalone's own certificate", withCert(own)}

	call := func(addr string, c caller, f func(ctx context.Context, cc *grpc.ClientConn) error) error {
		cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(c.creds))
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return f(ctx, cc)
	}
	bookieCalls := map[string]func(ctx context.Context, cc *grpc.ClientConn) error{
		"ReadEntry": func(ctx context.Context, cc *grpc.ClientConn) error {
			_, err := bookiepb.NewBookieClient(cc).ReadEntry(ctx, &bookiepb.ReadEntryRequest{LedgerId: 1, EntryId: 0})
			return err
		},
		"ReadLac(fence)": func(ctx context.Context, cc *grpc.ClientConn) error {
			_, err := bookiepb.NewBookieClient(cc).ReadLac(ctx, &bookiepb.ReadLacRequest{LedgerId: 1 << 40, Fence: true})
			return err
		},
		"AddEntries": func(ctx context.Context, cc *grpc.ClientConn) error {
			st, err := bookiepb.NewBookieClient(cc).AddEntries(ctx)
			if err != nil {
				return err
			}
			if err := st.Send(&bookiepb.AddRequest{RequestId: 1, LedgerId: 1 << 41, EntryId: 0, Payload: []byte("x")}); err != nil {
				return err
			}
			_, err = st.Recv()
			return err
		},
	}
	info := func(ctx context.Context, cc *grpc.ClientConn) error {
		_, err := bookiepb.NewBookieClient(cc).Info(ctx, &bookiepb.InfoRequest{})
		return err
	}
	verify := func(ctx context.Context, cc *grpc.ClientConn) error {
		_, err := replpb.NewReplicationClient(cc).Verify(ctx, &replpb.VerifyRequest{Source: "standalone", Topic: "persistent://nosuch/ns/t"})
		return err
	}
	refused := func(what string, c caller, err error, code codes.Code, msg string) {
		t.Helper()
		if status.Code(err) != code || !strings.Contains(err.Error(), msg) {
			t.Errorf("%s by %s: %v, want %v (%q)", what, c.name, err, code, msg)
		}
	}
	// No credentials: not served by the bookie nor the replication port.
	for _, c := range []caller{plain, noCert} {
		for name, f := range bookieCalls {
			refused("bookie "+name, c, call(bookieAddr, c, f), codes.Unavailable, "")
		}
		refused("bookie Info", c, call(bookieAddr, c, info), codes.Unavailable, "")
		refused("replication Verify", c, call(replAddr, c, verify), codes.Unavailable, "")
	}
	// The wrong role: refused, naming the role wanted.
	for _, c := range []caller{user, bookieRole} {
		for name, f := range bookieCalls {
			refused("bookie "+name, c, call(bookieAddr, c, f), codes.PermissionDenied, "role broker or autorecovery")
		}
		if err := call(bookieAddr, c, info); err != nil {
			t.Errorf("bookie Info by %s: %v", c.name, err)
		}
	}
	refused("replication Verify", user, call(replAddr, user, verify), codes.PermissionDenied, "does not speak for region standalone")
	refused("replication Verify", bookieRole, call(replAddr, bookieRole, verify), codes.PermissionDenied, "role broker")
	// The standalone's own certificate is served: answers about what is
	// asked (no such ledger, no such namespace), not refusals.
	for name, f := range bookieCalls {
		if err := call(bookieAddr, self, f); status.Code(err) == codes.PermissionDenied || status.Code(err) == codes.Unavailable {
			t.Errorf("bookie %s by %s: %v", name, self.name, err)
		}
	}
	if err := call(replAddr, self, verify); status.Code(err) != codes.NotFound {
		t.Errorf("replication Verify by %s: %v, want NotFound (no such namespace)", self.name, err)
	}

	// etcd: the standalone's embedded etcd serves its own certificate
	// only.
	etcdList := func(f tlsutil.Files, timeout time.Duration) error {
		src, err := tlsutil.NewSource(f)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		st, err := cluster.Connect(ctx, cluster.StoreConfig{Endpoints: []string{"https://" + etcdAddr}, Prefix: "/meridian", TLS: src.ClientConfig("")})
		if err != nil {
			return err
		}
		defer st.Close()
		_, _, err = st.List(ctx, "/")
		return err
	}
	if err := etcdList(alice, 3*time.Second); err == nil {
		t.Errorf("the embedded etcd served a user's certificate of the CA")
	}
	if err := etcdList(own, 10*time.Second); err != nil {
		t.Errorf("the embedded etcd with the standalone's certificate: %v", err)
	}
}
