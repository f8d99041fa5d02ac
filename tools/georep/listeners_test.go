package georep

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/meridian-mq/meridian/tools/testutil"
	"github.com/meridian-mq/meridian/tools/up"
)

// ownConns counts this test process's own established TCP connections
// to addr (host:port): /proc/net/tcp's entries whose socket inode is one
// of /proc/self/fd's — the client's, never a broker's (a standby region's
// broker probes the active region's internal address itself).
func ownConns(t *testing.T, addr string) int {
	t.Helper()
	mine := map[string]bool{}
	fds, _ := os.ReadDir("/proc/self/fd")
	for _, fd := range fds {
		if l, err := os.Readlink("/proc/self/fd/" + fd.Name()); err == nil && strings.HasPrefix(l, "socket:[") {
			mine[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] = true
		}
	}
	host, port, _ := net.SplitHostPort(addr)
	ip := net.ParseIP(host).To4()
	p, _ := strconv.Atoi(port)
	want := fmt.Sprintf("%02X%02X%02X%02X:%04X", ip[3], ip[2], ip[1], ip[0], p)
	b, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) > 9 && strings.EqualFold(f[2], want) && f[3] == "01" && mine[f[9]] {
			n++
		}
	}
	return n
}

// Requirement (issue 28, advertised listeners across regions): a client
// on listener "external" given only the standby region's broker (west,
// its external address) for an active-standby namespace active in east
// is redirected to east's broker by its external address, never its
// internal one — over the binary protocol's LOOKUP and over HTTP
// (/lookup/v2/topic/... naming the listener) — and produces there.
func TestExternalListenerRedirectAcrossRegions(t *testing.T) {
	external := map[string]string{} // broker name → its external host:port
	internal := map[string]string{}
	externalHTTP := map[string]string{} // broker name → its external admin host:port (advertised only)
	d := startDeploymentWith(t, up.Options{Regions: []string{"east", "west"}, BrokersPerRegion: 1, BookiesPerRegion: 3, RacksPerRegion: 3},
		func(p *up.Plan) {
			for i := range p.Procs {
				ps := &p.Procs[i]
				if ps.Role != "broker" {
					continue
				}
				ext := "127.0.0.2:" + strconv.Itoa(testutil.FreePort(t))
				extHTTP := "127.0.0.2:" + strconv.Itoa(testutil.FreePort(t))
				external[ps.Name], internal[ps.Name], externalHTTP[ps.Name] = ext, ps.Addr, extHTTP
				ps.Args = append(ps.Args, "--advertised-listeners", "internal:pulsar://"+ps.Addr+",external:pulsar://"+ext+",external:http://"+extHTTP,
					"--bind-addresses", "external:pulsar://"+ext, "--internal-listener-name", "internal")
			}
		})
	d.createNamespace("public/as", []string{"east", "west"}, map[string]any{"mode": "async", "failover": "active-standby", "primary": "east"})
	const topic = "persistent://public/as/listeners"

	c, err := pulsar.NewClient(pulsar.ClientOptions{URL: "pulsar://" + external["west-broker-1"], ListenerName: "external",
		ConnectionTimeout: 5 * time.Second, OperationTimeout: 30 * time.Second, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true, SendTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, err := p.Send(context.Background(), &pulsar.ProducerMessage{Payload: []byte("0")}); err != nil {
		t.Fatal(err)
	}
	if n := d.publishers("east", "public/as/listeners"); n != 1 {
		t.Fatalf("east serves %d producers, want the client's", n)
	}
	if n := ownConns(t, external["east-broker-1"]); n == 0 {
		t.Fatalf("the client has no connection to east's external address %s", external["east-broker-1"])
	}
	for name, addr := range internal {
		if n := ownConns(t, addr); n != 0 {
			t.Fatalf("the external client has %d connections to %s's internal address %s", n, name, addr)
		}
	}

	// Over HTTP, at west's admin API, naming the listener as Pulsar's
	// clients do, and naming none.
	// Its httpUrl is east's broker's web service URL in that listener
	// (issue 28 §1): the external one advertised, else its admin URL.
	var westAdmin, eastAdmin string
	for _, pe := range d.region("west").Processes {
		if pe.Role == "broker" {
			westAdmin = pe.Admin
		}
	}
	for _, pe := range d.region("east").Processes {
		if pe.Role == "broker" {
			eastAdmin = pe.Admin
		}
	}
	for _, c := range []struct{ query, want, wantHTTP string }{
		{"?listenerName=external", external["east-broker-1"], externalHTTP["east-broker-1"]},
		{"", internal["east-broker-1"], eastAdmin},
	} {
		resp, err := http.Get("http://" + westAdmin + "/lookup/v2/topic/persistent/public/as/listeners" + c.query)
		if err != nil {
			t.Fatal(err)
		}
		var ld struct {
			BrokerURL string `json:"brokerUrl"`
			HTTPURL   string `json:"httpUrl"`
		}
		json.NewDecoder(resp.Body).Decode(&ld)
		resp.Body.Close()
		if resp.StatusCode != 200 || ld.BrokerURL != "pulsar://"+c.want {
			t.Errorf("HTTP lookup at west%s: %d %q, want east's pulsar://%s", c.query, resp.StatusCode, ld.BrokerURL, c.want)
		}
		if ld.HTTPURL != "http://"+c.wantHTTP {
			t.Errorf("HTTP lookup at west%s: httpUrl %q, want east's http://%s", c.query, ld.HTTPURL, c.wantHTTP)
		}
	}
}

// Requirement (issue 28 §2): a broker's /readyz says "region-fenced"
// while its region, active for an active-standby namespace, cannot renew
// the namespace's lease (the global store's quorum paused: west's member
// and the witness), and is green again once the quorum is back; being
// fenced is not a liveness failure. (West is no control here: it is the
// active region of its own public/default, and fences itself too.)
func TestReadyzRedWhileRegionFenced(t *testing.T) {
	d := startDeployment(t, up.Options{Regions: []string{"east", "west"}, BrokersPerRegion: 1, BookiesPerRegion: 3, RacksPerRegion: 3, OwnershipTTL: faultOwnershipTTL, FailoverLeaseTTL: "3s"})
	d.createNamespace("public/as", []string{"east", "west"}, map[string]any{"mode": "async", "failover": "active-standby", "primary": "east"})
	c := d.client("east")
	p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: "persistent://public/as/fenced", DisableBatching: true, SendTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, err := p.Send(context.Background(), &pulsar.ProducerMessage{Payload: []byte("0")}); err != nil {
		t.Fatal(err)
	}
	admin := func(region string) string {
		for _, pe := range d.region(region).Processes {
			if pe.Role == "broker" {
				return "http://" + pe.Admin
			}
		}
		t.Fatalf("no broker in %s", region)
		return ""
	}
	east, west := admin("east"), admin("west")
	waitReady(t, east+"/readyz", 200, "ok", 30*time.Second)
	waitReady(t, west+"/readyz", 200, "ok", 30*time.Second)

	var quorum []int
	for _, ps := range d.d.Plan.Procs {
		if ps.Role == "witness" || ps.Role == "global-etcd" && ps.Region == "west" {
			quorum = append(quorum, d.d.Pid(ps.Name))
		}
	}
	if len(quorum) != 2 {
		t.Fatalf("found %d of the global store's other members, want west's and the witness", len(quorum))
	}
	for _, pid := range quorum {
		syscall.Kill(pid, syscall.SIGSTOP)
	}
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			for _, pid := range quorum {
				syscall.Kill(pid, syscall.SIGCONT)
			}
		}
	}
	defer resume()
	waitReady(t, east+"/readyz", 503, "not ready: region-fenced", 20*time.Second)
	if code, body := getProbe(east + "/healthz"); code != 200 {
		t.Errorf("fenced: east's /healthz %d %q, want 200", code, body)
	}
	resume()
	waitReady(t, east+"/readyz", 200, "ok", 60*time.Second)
}

func getProbe(url string) (int, string) {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b))
}

func waitReady(t *testing.T, url string, code int, body string, within time.Duration) {
	t.Helper()
	var lc int
	var lb string
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if lc, lb = getProbe(url); lc == code && lb == body {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s: %d %q after %s, want %d %q", url, lc, lb, within, code, body)
}
