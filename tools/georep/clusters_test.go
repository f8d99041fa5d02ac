package georep

import (
	"strings"
	"testing"

	"github.com/apache/pulsar-client-go/pulsaradmin"

	"github.com/meridian-mq/meridian/tools/up"
)

// pulsarAdmin is the unmodified pulsaradmin client on region's admin API
// (a TLS deployment's: trusting its CA, with its client certificate).
func (d *deployment) pulsarAdmin(region string) pulsaradmin.Client {
	d.t.Helper()
	cfg := &pulsaradmin.Config{WebServiceURL: d.region(region).AdminURL}
	if d.tls {
		f := up.ClientFiles(d.dir)
		cfg.TLSTrustCertsFilePath, cfg.TLSCertFile, cfg.TLSKeyFile = f.CAFile, f.CertFile, f.KeyFile
	}
	adm, err := pulsaradmin.NewClient(cfg)
	if err != nil {
		d.t.Fatal(err)
	}
	return adm
}

// checkClusters is issue 29's Clusters().Get through pulsaradmin on
// region asked's admin API: every region of the deployment answers with
// its own web service and broker service URLs — those its brokers
// registered in the global store, so another region's too — in the TLS
// fields on a TLS deployment (the plain ones empty, as a TLS-only Pulsar
// cluster's), the plain fields otherwise.
func checkClusters(t *testing.T, d *deployment, asked string) {
	t.Helper()
	adm := d.pulsarAdmin(asked)
	for _, r := range d.e.Regions {
		cd, err := adm.Clusters().Get(r.Name)
		if err != nil {
			t.Errorf("Clusters().Get(%s) in %s: %v", r.Name, asked, err)
			continue
		}
		type urls struct{ serviceURL, serviceURLTLS, brokerServiceURL, brokerServiceURLTLS string }
		want := urls{serviceURL: r.AdminURL, brokerServiceURL: r.ServiceURL}
		if d.tls {
			want = urls{serviceURLTLS: r.AdminURL, brokerServiceURLTLS: r.ServiceURL}
		}
		got := urls{cd.ServiceURL, cd.ServiceURLTls, cd.BrokerServiceURL, cd.BrokerServiceURLTls}
		if got != want || (d.tls && !strings.HasPrefix(got.serviceURLTLS, "https://")) {
			t.Errorf("Clusters().Get(%s) in %s: %+v, want %+v", r.Name, asked, got, want)
		}
	}
}
