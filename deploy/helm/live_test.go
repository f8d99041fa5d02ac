package helmtest

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

// asEtcd makes the test binary etcd (etcd's own main): the chart's etcd
// arguments are parsed and run by the etcd the product is built with.
const asEtcd = "HELMTEST_AS_ETCD"

func TestMain(m *testing.M) {
	if os.Getenv(asEtcd) == "1" {
		etcdmain.Main(os.Args)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// process is a container started on loopback: its listeners moved to
// free local ports (rendered port → local host:port).
type process struct {
	ct    *container
	cmd   *exec.Cmd
	log   string
	local map[int]string
	done  chan error
}

// runLive starts the release's first pod of each workload on this
// machine — etcd, then bookies, then brokers — with the rendered
// arguments, environment and config file; only listen and advertised
// addresses (moved to free loopback ports), data directories and the
// etcd endpoints (the local etcd) are replaced, by flags, which win over
// the environment and the file. Then every probe is sent where its port
// went: liveness and startup must answer 200, readiness 200 or 503 (a
// red check, not a path the binary does not serve).
func (r *rendered) runLive(t *testing.T, meridian string, cts []*container) {
	byComponent := func(c string) []*container {
		var out []*container
		seen := map[string]bool{}
		for _, ct := range cts {
			if ct.w.template.Labels["app.kubernetes.io/component"] == c && !seen[c] {
				if !ct.etcd && ct.eff == nil {
					t.Errorf("live: %s not started: its --print-config failed", ct)
					continue
				}
				seen[c] = true
				out = append(out, ct)
			}
		}
		return out
	}
	var etcdClient string
	for _, ct := range byComponent("etcd") {
		p := startEtcd(t, ct)
		p.checkProbes(t)
		for rendered, key := range ct.listeners {
			if key == "--listen-client-urls" {
				etcdClient = "http://" + p.local[rendered]
			}
		}
	}
	if etcdClient == "" {
		t.Fatal("live: no chart-managed etcd to run the region against")
	}
	for _, c := range []string{"bookie", "broker"} {
		for _, ct := range byComponent(c) {
			p := startMeridian(t, meridian, ct, etcdClient)
			p.checkProbes(t)
		}
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func (p *process) localFor(t *testing.T, rendered int) string {
	if a, ok := p.local[rendered]; ok {
		return a
	}
	a := freeAddr(t)
	p.local[rendered] = a
	return a
}

func start(t *testing.T, ct *container, bin string, args, env []string) *process {
	t.Helper()
	p := &process{ct: ct, local: map[int]string{}, done: make(chan error, 1)}
	p.log = filepath.Join(t.TempDir(), ct.w.name+".log")
	f, err := os.Create(p.log)
	if err != nil {
		t.Fatal(err)
	}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Env, p.cmd.Stdout, p.cmd.Stderr = env, f, f
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.done <- p.cmd.Wait(); f.Close() }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill() // this test's own child, by its PID
		<-p.done
	})
	t.Logf("%s: started %s %s", ct, filepath.Base(bin), strings.Join(args, " "))
	return p
}

func startEtcd(t *testing.T, ct *container) *process {
	p := &process{local: map[int]string{}}
	var over []string
	name := ""
	for _, a := range ct.args {
		flag, v, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		switch flag {
		case "name":
			name = v
		case "listen-client-urls", "advertise-client-urls", "listen-peer-urls", "initial-advertise-peer-urls", "listen-metrics-urls":
			u, err := url.Parse(v)
			if err != nil {
				t.Fatalf("%s: --%s: %v", ct, flag, err)
			}
			port, _ := strconv.Atoi(u.Port())
			over = append(over, fmt.Sprintf("--%s=http://%s", flag, p.localFor(t, port)))
		}
	}
	peer := ""
	for rp, key := range ct.listeners {
		if key == "--listen-peer-urls" {
			peer = p.local[rp]
		}
	}
	over = append(over, "--data-dir="+filepath.Join(t.TempDir(), "etcd"), "--initial-cluster="+name+"=http://"+peer, "--initial-cluster-state=new")
	q := start(t, ct, os.Args[0], append(slices.Clone(ct.args), over...), append(slices.Clone(ct.env), asEtcd+"=1"))
	q.local = p.local
	return q
}

func startMeridian(t *testing.T, meridian string, ct *container, etcdClient string) *process {
	p := &process{local: map[int]string{}}
	var over []string
	for _, s := range ct.eff {
		switch {
		case strings.HasSuffix(lastPart(s.key), "addr") && s.value != "":
			_, port, _ := net.SplitHostPort(s.value)
			rp, _ := strconv.Atoi(port)
			over = append(over, fmt.Sprintf("--%s=%s", s.flag, p.localFor(t, rp)))
		case s.key == "metadata.endpoints" || (s.key == "metadata.global" && s.value != ""):
			over = append(over, fmt.Sprintf("--%s=%s", s.flag, etcdClient))
		case s.key == "gossip.seeds":
			over = append(over, "--gossip-seeds=")
		case strings.HasSuffix(s.key, "data_dir"):
			over = append(over, fmt.Sprintf("--%s=%s", s.flag, filepath.Join(t.TempDir(), "data")))
		}
	}
	slices.Sort(over)
	q := start(t, ct, meridian, append(append([]string{ct.role}, ct.args...), over...), ct.env)
	q.local = p.local
	return q
}

// checkProbes sends each of the container's probes to where its port
// went and waits (up to a minute) for the answer the probe needs.
func (p *process) checkProbes(t *testing.T) {
	t.Helper()
	for _, pr := range p.ct.probes() {
		g := pr.HTTPGet
		port := p.ct.containerPort(g.Port.StrVal, int(g.Port.IntVal))
		addr, ok := p.local[port]
		if !ok {
			t.Errorf("%s: %s probe port %d: no listener was moved from it", p.ct, pr.kind, port)
			continue
		}
		u := "http://" + addr + g.Path
		ok200 := pr.kind != "readiness"
		deadline := time.Now().Add(time.Minute)
		last := ""
		for {
			resp, err := (&http.Client{Timeout: 5 * time.Second}).Get(u)
			if err == nil {
				resp.Body.Close()
				last = resp.Status
				if resp.StatusCode == http.StatusNotFound {
					t.Errorf("%s: %s probe %s: %s — the binary does not serve it", p.ct, pr.kind, g.Path, resp.Status)
					break
				}
				if resp.StatusCode == http.StatusOK || (!ok200 && resp.StatusCode == http.StatusServiceUnavailable) {
					t.Logf("%s: %s probe %s (moved to %s): %s", p.ct, pr.kind, g.Path, addr, resp.Status)
					break
				}
			} else {
				last = err.Error()
				var op *net.OpError
				if !errors.As(err, &op) || op.Op != "dial" {
					// Not "nothing listens yet": something answered, and not HTTP.
					t.Errorf("%s: %s probe %s: %v", p.ct, pr.kind, u, err)
					break
				}
			}
			select {
			case err := <-p.done:
				p.done <- err
				t.Fatalf("%s: exited (%v) before its %s probe answered; log:\n%s", p.ct, err, pr.kind, tail(p.log))
			default:
			}
			if time.Now().After(deadline) {
				t.Errorf("%s: %s probe %s: no good answer within a minute (last: %s); log:\n%s", p.ct, pr.kind, u, last, tail(p.log))
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
}

func tail(file string) string {
	b, _ := os.ReadFile(file)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 30 {
		lines = lines[len(lines)-30:]
	}
	return strings.Join(lines, "\n")
}
