package broker_test

import (
	"encoding/json"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/meridian-mq/meridian/broker/meta"
	"github.com/meridian-mq/meridian/tools/testutil"
)

// The CLI against a real `meridian standalone`.
func TestReplicationCLIRegions(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real process")
	}
	s := testutil.StartStandalone(t, t.TempDir())
	bin := testutil.MeridianBinary(t)
	cli := func(args ...string) (string, error) {
		cmd := exec.Command(bin, append([]string{"admin", "--url", s.AdminURL}, args...)...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := cli("regions", "list")
	if err != nil || !strings.Contains(out, `"standalone"`) {
		t.Fatalf("regions list: %v\n%s", err, out)
	}
	out, err = cli("namespaces", "create", "public/geo", "--regions", "standalone", "--replication", "async", "--failover", "active-active",
		"--start-at", "latest", "--replication-backlog-quota", "10GiB", "--sync-timeout", "5s")
	if err != nil {
		t.Fatalf("create: %v\n%s", err, out)
	}
	out, err = cli("namespaces", "create", "public/mars", "--regions", "standalone,mars")
	if err == nil || !strings.Contains(out, "mars") || !strings.Contains(out, "400") {
		t.Fatalf("create with an unknown region: %v\n%s", err, out)
	}
	out, err = cli("namespaces", "update", "public/geo", "--start-at", "earliest")
	if err != nil {
		t.Fatalf("update: %v\n%s", err, out)
	}
	out, err = cli("namespaces", "update", "public/geo", "--replication", "sync")
	if err == nil || !strings.Contains(out, "at least 2 regions") {
		t.Fatalf("update to sync with one region: %v\n%s", err, out)
	}
	out, err = cli("namespaces", "get", "public/geo")
	if err != nil {
		t.Fatalf("get: %v\n%s", err, out)
	}
	var p meta.Policies
	if err := json.Unmarshal([]byte(out), &p); err != nil {
		t.Fatalf("get is not JSON: %v\n%s", err, out)
	}
	want := meta.ReplicationPolicy{Mode: "async", Failover: "active-active", StartAt: "earliest", BacklogQuotaBytes: 10 << 30, SyncTimeoutMs: 5000}
	if p.Replication == nil || *p.Replication != want || !slices.Equal(p.ReplicationClusters, []string{"standalone"}) {
		t.Fatalf("stored %v %+v, want %+v", p.ReplicationClusters, p.Replication, want)
	}
	code, body := adminCall(t, "GET", s.AdminURL+"/admin/v2/namespaces/public/default", nil)
	if code != 200 || !strings.Contains(string(body), `"primary":"standalone"`) {
		t.Fatalf("public/default: %d %s", code, body)
	}
}
