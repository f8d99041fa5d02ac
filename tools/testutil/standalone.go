package testutil

import (
	"net/http"
	"testing"
	"time"
)

// Standalone is a `meridian standalone` process on free ports.
type Standalone struct {
	*Proc
	URL      string // pulsar://127.0.0.1:PORT
	AdminURL string // http://127.0.0.1:PORT
	DataDir  string
}

// StartStandalone starts `meridian standalone` on dataDir (reused across
// restarts) and waits until its admin API answers.
func StartStandalone(t testing.TB, dataDir string, extra ...string) *Standalone {
	t.Helper()
	addr, admin := FreeAddr(t), FreeAddr(t)
	args := append([]string{"standalone", "--data-dir", dataDir, "--listen", addr, "--admin", admin,
		"--etcd-client-url", "http://" + FreeAddr(t), "--etcd-peer-url", "http://" + FreeAddr(t),
		"--bookie-base-port", "0", "--replication-listen", FreeAddr(t), "--log-level", "warn"}, extra...)
	s := &Standalone{Proc: StartProc(t, "standalone", MeridianBinary(t), args...), URL: "pulsar://" + addr, AdminURL: "http://" + admin, DataDir: dataDir}
	s.WaitReady()
	return s
}

// WaitReady waits until the admin API serves (the broker is up).
func (s *Standalone) WaitReady() {
	s.t.Helper()
	Eventually(s.t, 90*time.Second, "standalone ready", func() bool {
		resp, err := http.Get(s.AdminURL + "/admin/v2/tenants")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
}

// Restart restarts the process on the same ports and data.
func (s *Standalone) Restart() {
	s.t.Helper()
	s.Proc.Restart()
	s.WaitReady()
}
