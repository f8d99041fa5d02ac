package georep

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	plog "github.com/apache/pulsar-client-go/pulsar/log"
	"github.com/meridian-mq/meridian/internal/testutil"
	"github.com/meridian-mq/meridian/internal/up"
)

type deployment struct {
	t   *testing.T
	d   *up.Deployment
	e   up.Endpoints
	dir string
}

func startDeployment(t *testing.T, o up.Options) *deployment {
	t.Helper()
	bin := testutil.MeridianBinary(t)
	o.DataDir = t.TempDir()
	if o.GossipProfile == "" {
		o.GossipProfile = "fast"
	}
	if o.OwnershipTTL == "" {
		o.OwnershipTTL = "3s"
	}
	plan, err := up.NewPlan(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	d, err := up.Start(ctx, plan, bin, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	dep := &deployment{t: t, d: d, dir: o.DataDir, e: d.Endpoints()}
	t.Cleanup(func() {
		if t.Failed() {
			dep.dumpLogs()
		}
		d.Stop(5 * time.Second)
	})
	return dep
}

func (d *deployment) dumpLogs() {
	files, _ := filepath.Glob(filepath.Join(d.dir, "logs", "*.log"))
	for _, f := range files {
		b, _ := os.ReadFile(f)
		if len(b) == 0 {
			continue
		}
		if len(b) > 6000 {
			b = b[len(b)-6000:]
		}
		d.t.Logf("---- %s ----\n%s", filepath.Base(f), b)
	}
}

func (d *deployment) region(name string) up.RegionEndpoint {
	for _, r := range d.e.Regions {
		if r.Name == name {
			return r
		}
	}
	d.t.Fatalf("no region %s", name)
	return up.RegionEndpoint{}
}

// killRegion kill -9s every process of a region (its global-store member
// included).
func (d *deployment) killRegion(name string) {
	for _, p := range d.region(name).Processes {
		if pid := d.d.Pid(p.Name); pid > 0 {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

func (d *deployment) kill(name string) {
	if pid := d.d.Pid(name); pid > 0 {
		syscall.Kill(pid, syscall.SIGKILL)
	}
}

// admin calls a region's admin API and decodes the answer into out.
func (d *deployment) admin(region, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	var resp *http.Response
	var err error
	// Any broker of the region answers; some may have been killed.
	for _, p := range d.region(region).Processes {
		if p.Role != "broker" {
			continue
		}
		var req *http.Request
		if body != nil {
			b, _ := json.Marshal(body)
			rd = bytes.NewReader(b)
		}
		req, err = http.NewRequest(method, "http://"+p.Admin+path, rd)
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		if resp, err = http.DefaultClient.Do(req); err == nil {
			break
		}
	}
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, b)
	}
	if out != nil && len(b) > 0 {
		return json.Unmarshal(b, out)
	}
	return nil
}

// createNamespace creates tenant/ns replicating across regions with the
// given Meridian replication policy fields, keeping data forever
// (retention -1, so a region's copy is not trimmed before a consumer
// subscribes there).
func (d *deployment) createNamespace(ns string, regions []string, repl map[string]any) {
	d.t.Helper()
	body := map[string]any{
		"replication_clusters": regions,
		"meridian_replication": repl,
		"retention_policies":   map[string]int{"retentionTimeInMinutes": -1, "retentionSizeInMB": -1},
	}
	if err := d.admin(regions[0], "PUT", "/admin/v2/namespaces/"+ns, body, nil); err != nil {
		d.t.Fatal(err)
	}
}

type replStatus struct {
	Topic          string
	Remote         string
	Connected      bool
	BacklogEntries int64
	AckedSeq       uint64
	LocalSeq       uint64
	LastError      string
}

// replication asks the region's brokers, in turn until one answers, for
// the replication status of the whole region.
func (d *deployment) replication(region, filter string) ([]replStatus, error) {
	var err error
	for _, p := range d.region(region).Processes {
		if p.Role != "broker" {
			continue
		}
		var resp *http.Response
		resp, err = http.Get("http://" + p.Admin + "/admin/v2/meridian/replication?filter=" + filter)
		if err != nil {
			continue
		}
		var out []replStatus
		err = json.NewDecoder(resp.Body).Decode(&out)
		ok := resp.StatusCode == http.StatusOK
		resp.Body.Close()
		if err == nil && ok {
			return out, nil
		}
	}
	return nil, fmt.Errorf("no broker of %s answered: %v", region, err)
}

// waitReplicated waits until region's replicators of topic report every
// local entry acknowledged by every remote region in remotes.
func (d *deployment) waitReplicated(region, topic string, remotes []string, timeout time.Duration) {
	d.t.Helper()
	var last []replStatus
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		st, err := d.replication(region, topic)
		last = st
		done := 0
		for _, s := range st {
			for _, r := range remotes {
				if s.Remote == r && s.LocalSeq > 0 && s.AckedSeq == s.LocalSeq && s.BacklogEntries == 0 {
					done++
				}
			}
		}
		if err == nil && done == len(remotes) {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	d.t.Fatalf("%s: %s not replicated to %v within %v: %+v", region, topic, remotes, timeout, last)
}

func quietLogger() plog.Logger {
	return plog.NewLoggerWithSlog(slog.New(slog.NewTextHandler(io.Discard, nil)))
}

func (d *deployment) client(region string) pulsar.Client {
	d.t.Helper()
	url := d.e.ServiceURL
	if region != "" {
		url = d.region(region).ServiceURL
	}
	c, err := pulsar.NewClient(pulsar.ClientOptions{URL: url, ConnectionTimeout: 5 * time.Second, OperationTimeout: 30 * time.Second, Logger: quietLogger()})
	if err != nil {
		d.t.Fatal(err)
	}
	d.t.Cleanup(c.Close)
	return c
}

func idString(id pulsar.MessageID) string {
	return fmt.Sprintf("%d:%d:%d", id.LedgerID(), id.EntryID(), id.BatchIdx())
}

// payload is "key/index/region"; parse returns its parts.
func parsePayload(b []byte) (key string, idx int, region string) {
	parts := strings.Split(string(b), "/")
	if len(parts) != 3 {
		return "", -1, ""
	}
	fmt.Sscan(parts[1], &idx)
	return parts[0], idx, parts[2]
}
