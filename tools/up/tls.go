package up

import (
	"crypto/rand"
	"crypto/tls"
	"encoding/base64"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/meridian-mq/meridian/internal/tlsutil"
)

// TLS for a local deployment (Options.TLS): a CA made with Go's crypto in
// DATA-DIR/tls and a certificate per process, each naming 127.0.0.1,
// ::1, localhost and this host (tlsutil.LocalNames) and its region (the
// URI SAN meridian://region/R, which other regions' brokers check on
// replication streams) and its role (the URI SAN meridian://role/ROLE:
// a bookie serves ledger operations to brokers only, a broker takes
// replication streams from other regions' brokers only). As every process listens on 127.0.0.1, the
// certificates cover the first host of the multi-region service URL,
// which the Go client checks every broker against (TLSValidateHostname).
// A "client" certificate (no region) is made for tools and tests.

// TLSDir is where a deployment's CA and certificates are.
func TLSDir(dataDir string) string { return filepath.Join(dataDir, "tls") }

// CAFile is the CA clients of a TLS deployment trust.
func CAFile(dataDir string) string { return filepath.Join(TLSDir(dataDir), "ca.pem") }

// ClientFiles is the client certificate of a TLS deployment.
func ClientFiles(dataDir string) tlsutil.Files {
	d := TLSDir(dataDir)
	return tlsutil.Files{CertFile: filepath.Join(d, "client.pem"), KeyFile: filepath.Join(d, "client-key.pem"), CAFile: CAFile(dataDir)}
}

func (o Options) scheme() string {
	if o.TLS {
		return "https://"
	}
	return "http://"
}

// pulsarScheme is the scheme of the Pulsar service URLs.
func (o Options) pulsarScheme() string {
	if o.TLS {
		return "pulsar+ssl://"
	}
	return "pulsar://"
}

func tlsArgs(dataDir, name string) []string {
	d := TLSDir(dataDir)
	return []string{"--tls-cert-file", filepath.Join(d, name+".pem"), "--tls-key-file", filepath.Join(d, name+"-key.pem"),
		"--tls-trust-certs-file", CAFile(dataDir)}
}

// makePKI writes the CA and every process's certificate (kept when they
// are already there: a second `up` on the same directory reuses them).
func (p *Plan) makePKI() error {
	leaves := map[string]tlsutil.Leaf{"client": tlsutil.LocalLeaf("client", "")}
	for _, ps := range p.Procs {
		leaves[ps.Name] = tlsutil.LocalLeaf(ps.Name, ps.regionOrWitness(), ps.tlsRole())
	}
	if _, err := tlsutil.LocalPKI(TLSDir(p.Options.DataDir), leaves); err != nil {
		return err
	}
	// The gossip key (AES-256), in a 0600 file named on the command line:
	// never the key itself, which plan.json and ps would show.
	kf := GossipKeyFile(p.Options.DataDir)
	if _, err := os.Stat(kf); err == nil {
		return nil
	}
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		return err
	}
	return os.WriteFile(kf, []byte(base64.StdEncoding.EncodeToString(k)+"\n"), 0o600)
}

// tlsRole is the role a process's certificate names (tlsutil.RolesOf):
// what the ports it calls check.
func (ps ProcSpec) tlsRole() string {
	switch ps.Role {
	case "broker":
		return tlsutil.RoleBroker
	case "bookie":
		return tlsutil.RoleBookie
	case "autorecovery":
		return tlsutil.RoleAutorecovery
	}
	return tlsutil.RoleEtcd // etcd, global-etcd, witness
}

// GossipKeyFile holds a TLS deployment's gossip key (base64).
func GossipKeyFile(dataDir string) string { return filepath.Join(TLSDir(dataDir), "gossip.key") }

// httpClient is the client `up` talks to its processes with: over TLS it
// trusts the CA and presents the client certificate (etcd asks for one).
func (d *Deployment) httpClient(timeout time.Duration) *http.Client {
	c := &http.Client{Timeout: timeout}
	if d.Plan.Options.TLS {
		src, err := tlsutil.NewSource(ClientFiles(d.Plan.Options.DataDir))
		if err == nil {
			c.Transport = &http.Transport{TLSClientConfig: src.ClientConfig("")}
		} else {
			c.Transport = &http.Transport{TLSClientConfig: &tls.Config{MinVersion: tls.VersionTLS12}}
		}
	}
	return c
}
