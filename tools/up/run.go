package up

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/meridian-mq/meridian/internal/httpserve"
)

// Deployment is a running plan.
type Deployment struct {
	Plan *Plan
	bin  string
	log  *slog.Logger

	mu    sync.Mutex
	procs map[string]*exec.Cmd
	ctl   *httpserve.Server
}

// Endpoints is the shape of DIR/endpoints.json (a contract: fields may be
// added, never renamed).
type Endpoints struct {
	ServiceURL  string           `json:"service_url"`
	Regions     []RegionEndpoint `json:"regions"`
	GlobalStore []string         `json:"global_store"`
	Witness     ProcEndpoint     `json:"witness"`
	ControlURL  string           `json:"control_url"`
	// TLSTrustCertsFile is the CA a client of a TLS deployment trusts
	// (pulsar.ClientOptions.TLSTrustCertsFilePath); empty without TLS.
	// (No secret is ever written here: keys stay in their 0600 files.)
	TLSTrustCertsFile string `json:"tls_trust_certs_file,omitempty"`
}

// RegionEndpoint is one region of endpoints.json.
type RegionEndpoint struct {
	Name       string         `json:"name"`
	ServiceURL string         `json:"service_url"`
	AdminURL   string         `json:"admin_url"`
	EtcdURL    string         `json:"etcd_url"`
	Processes  []ProcEndpoint `json:"processes"`
}

// ProcEndpoint is one process of endpoints.json.
type ProcEndpoint struct {
	Name  string `json:"name"`
	Role  string `json:"role"`
	Rack  string `json:"rack,omitempty"`
	Pid   int    `json:"pid"`
	Addr  string `json:"addr"`
	Admin string `json:"admin,omitempty"`
	// Replication is a broker's replication (gRPC) address.
	Replication string `json:"replication,omitempty"`
	// Metrics is a bookie's HTTP (/metrics) address.
	Metrics string `json:"metrics,omitempty"`
}

// Start starts every process of the plan with the meridian binary bin and
// waits until each serves.
func Start(ctx context.Context, p *Plan, bin string, log *slog.Logger) (*Deployment, error) {
	if err := p.Save(); err != nil {
		return nil, err
	}
	if p.Options.TLS {
		if err := p.makePKI(); err != nil {
			return nil, fmt.Errorf("up: TLS certificates: %w", err)
		}
	}
	d := &Deployment{Plan: p, bin: bin, log: log, procs: map[string]*exec.Cmd{}}
	if err := os.MkdirAll(filepath.Join(p.Options.DataDir, "logs"), 0o755); err != nil {
		return nil, err
	}
	// etcds first (the global members need each other for a quorum), then
	// bookies, then brokers.
	for _, roles := range [][]string{{"etcd", "global-etcd", "witness"}, {"bookie"}, {"broker"}} {
		var started []ProcSpec
		for _, ps := range p.Procs {
			if contains(roles, ps.Role) {
				if err := d.startProc(ps); err != nil {
					d.Stop(10 * time.Second)
					return nil, err
				}
				started = append(started, ps)
			}
		}
		for _, ps := range started {
			if err := d.waitReady(ctx, ps, 90*time.Second); err != nil {
				d.Stop(10 * time.Second)
				return nil, fmt.Errorf("up: %s: %w (see %s)", ps.Name, err, d.logPath(ps.Name))
			}
		}
		if roles[0] == "etcd" {
			if p.Options.TLS {
				if err := d.enableEtcdAuth(ctx); err != nil {
					d.Stop(10 * time.Second)
					return nil, err
				}
			}
			d.waitWitnessLeads(ctx, 30*time.Second)
		}
	}
	if err := d.SetDefaultReplication(ctx, 90*time.Second); err != nil {
		d.Stop(10 * time.Second)
		return nil, err
	}
	if err := d.startControl(); err != nil {
		d.Stop(10 * time.Second)
		return nil, err
	}
	return d, d.WriteEndpoints()
}

// DefaultNamespace replicates across every region of a deployment.
const DefaultNamespace = "public/default"

// SetDefaultReplication makes public/default's replication deterministic:
// its regions are all the regions of the plan and its primary is the
// first one. (Each region's first broker adds its region to
// public/default, and whichever region created it first would otherwise
// be its primary.) It POSTs to every broker's admin API in turn until one
// accepts — brokers may still be registering their regions — or timeout
// passes. Only the regions and the primary are set; the namespace's other
// policies are kept.
func (d *Deployment) SetDefaultReplication(ctx context.Context, timeout time.Duration) error {
	regions := d.Plan.Options.Regions
	body, _ := json.Marshal(map[string]any{"regions": regions, "primary": regions[0]})
	var admins []string
	for _, ps := range d.Plan.Procs {
		if ps.Role == "broker" && ps.Admin != "" {
			admins = append(admins, d.Plan.Options.scheme()+ps.Admin)
		}
	}
	if len(admins) == 0 {
		return errors.New("up: no broker to set the replication of " + DefaultNamespace)
	}
	c := d.httpClient(5 * time.Second)
	var last error
	deadline := time.Now().Add(timeout)
	for i := 0; ; i++ {
		u := admins[i%len(admins)] + "/admin/v2/namespaces/" + DefaultNamespace + "/meridian-replication"
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := c.Do(req)
		if err == nil {
			msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			resp.Body.Close()
			if resp.StatusCode/100 == 2 {
				return nil
			}
			err = fmt.Errorf("HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(msg)))
		}
		last = fmt.Errorf("POST %s: %w", u, err)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("up: set %s to regions %v with primary %s: not done in %v: %w", DefaultNamespace, regions, regions[0], timeout, last)
		}
		d.log.Debug("up: setting the default namespace's replication", "err", last)
		time.Sleep(250 * time.Millisecond)
	}
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func (d *Deployment) logPath(name string) string {
	return filepath.Join(d.Plan.Options.DataDir, "logs", name+".log")
}

func (d *Deployment) startProc(ps ProcSpec) error {
	f, err := os.OpenFile(d.logPath(ps.Name), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	// MERIDIAN_UP_LOG_LEVEL (debug, info, warn, error) overrides the
	// children's level, warn, to diagnose a test's failure.
	level := cmp.Or(os.Getenv("MERIDIAN_UP_LOG_LEVEL"), "warn")
	cmd := exec.Command(d.bin, append(ps.Args, "--log-level", level)...)
	cmd.Stdout, cmd.Stderr = f, f
	// Children die with `up` (no orphans if it is killed), and each is its
	// own process group so a terminal's ^C reaches `up` only.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if gid, ok := d.Plan.Options.RegionGIDs[ps.regionOrWitness()]; ok {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uint32(os.Getuid()), Gid: gid, NoSetGroups: true}
	}
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("up: start %s: %w", ps.Name, err)
	}
	go func() { cmd.Wait(); f.Close() }()
	d.mu.Lock()
	d.procs[ps.Name] = cmd
	d.mu.Unlock()
	return nil
}

// regionOrWitness is the process's region, "witness" for the witness.
func (ps ProcSpec) regionOrWitness() string {
	if ps.Role == "witness" {
		return "witness"
	}
	return ps.Region
}

// waitReady waits until a process serves: etcd answers /health, a bookie
// accepts TCP, a broker's admin API answers. A process that exits while
// starting is reported at once.
func (d *Deployment) waitReady(ctx context.Context, ps ProcSpec, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if pid := d.Pid(ps.Name); pid != 0 && !processAlive(pid) {
			tail, _ := os.ReadFile(d.logPath(ps.Name))
			if len(tail) > 2000 {
				tail = tail[len(tail)-2000:]
			}
			return fmt.Errorf("exited while starting: %s", strings.TrimSpace(string(tail)))
		}
		ok := false
		switch ps.Role {
		case "etcd", "global-etcd", "witness":
			ok = d.httpOK(d.Plan.Options.scheme() + ps.Addr + "/health")
		case "broker":
			ok = d.httpOK(d.Plan.Options.scheme() + ps.Admin + "/admin/v2/tenants")
		default:
			if c, err := net.DialTimeout("tcp", ps.Addr, 200*time.Millisecond); err == nil {
				c.Close()
				ok = true
			}
		}
		if ok {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return errors.New("not ready in time")
}

func (d *Deployment) httpOK(url string) bool {
	resp, err := d.httpClient(time.Second).Get(url)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == 200
}

// Restart starts a process of the plan again on the same data (after it
// was killed). A running process is killed first.
func (d *Deployment) Restart(ctx context.Context, name string) error {
	ps, ok := d.Plan.Proc(name)
	if !ok {
		return fmt.Errorf("up: no process %q", name)
	}
	d.mu.Lock()
	old := d.procs[name]
	d.mu.Unlock()
	if old != nil && old.Process != nil && processAlive(old.Process.Pid) {
		old.Process.Signal(syscall.SIGKILL)
		time.Sleep(100 * time.Millisecond)
	}
	if err := d.startProc(ps); err != nil {
		return err
	}
	if err := d.waitReady(ctx, ps, 90*time.Second); err != nil {
		return fmt.Errorf("up: %s: %w", name, err)
	}
	return d.WriteEndpoints()
}

// Pid returns a process's pid (0 if never started).
func (d *Deployment) Pid(name string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	if c := d.procs[name]; c != nil && c.Process != nil {
		return c.Process.Pid
	}
	return 0
}

// Endpoints builds the endpoints document.
func (d *Deployment) Endpoints() Endpoints {
	var e Endpoints
	var all []string
	o := d.Plan.Options
	for _, r := range d.Plan.Options.Regions {
		re := RegionEndpoint{Name: r}
		var urls []string
		for _, ps := range d.Plan.Procs {
			if ps.Region != r && !(ps.Role == "global-etcd" && ps.Region == r) {
				continue
			}
			pe := ProcEndpoint{Name: ps.Name, Role: ps.Role, Rack: ps.Rack, Pid: d.Pid(ps.Name), Addr: ps.Addr, Admin: ps.Admin, Replication: ps.Repl, Metrics: ps.Metrics}
			re.Processes = append(re.Processes, pe)
			switch ps.Role {
			case "broker":
				urls = append(urls, ps.Addr)
				if re.AdminURL == "" {
					re.AdminURL = o.scheme() + ps.Admin
				}
			case "etcd":
				re.EtcdURL = o.scheme() + ps.Addr
			case "global-etcd":
				e.GlobalStore = append(e.GlobalStore, o.scheme()+ps.Addr)
			}
		}
		re.ServiceURL = o.pulsarScheme() + strings.Join(urls, ",")
		all = append(all, urls...)
		e.Regions = append(e.Regions, re)
	}
	for _, ps := range d.Plan.Procs {
		if ps.Role == "witness" {
			e.Witness = ProcEndpoint{Name: ps.Name, Role: ps.Role, Pid: d.Pid(ps.Name), Addr: ps.Addr}
			e.GlobalStore = append(e.GlobalStore, o.scheme()+ps.Addr)
		}
	}
	sort.Strings(e.GlobalStore)
	e.ServiceURL = o.pulsarScheme() + strings.Join(all, ",")
	if o.TLS {
		e.TLSTrustCertsFile = CAFile(o.DataDir)
	}
	e.ControlURL = "http://" + d.Plan.Control
	return e
}

// WriteEndpoints writes DIR/endpoints.json.
func (d *Deployment) WriteEndpoints() error {
	b, _ := json.MarshalIndent(d.Endpoints(), "", "  ")
	tmp := filepath.Join(d.Plan.Options.DataDir, "endpoints.json.tmp")
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(d.Plan.Options.DataDir, "endpoints.json"))
}

// controlTokenFile holds the bearer token the control endpoint wants
// (DIR/control.token, 0600): only who can read the deployment's data
// directory restarts its processes.
func controlTokenFile(dir string) string { return filepath.Join(dir, "control.token") }

// startControl serves POST /restart?name=NAME for `meridian up --restart`,
// to callers presenting the token of controlTokenFile.
func (d *Deployment) startControl() error {
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return err
	}
	token := hex.EncodeToString(raw)
	tf := controlTokenFile(d.Plan.Options.DataDir)
	_ = os.Remove(tf) // a new file, created 0600: never an old one others may read
	if err := os.WriteFile(tf, []byte(token), 0o600); err != nil {
		return fmt.Errorf("up: control token: %w", err)
	}
	lis, err := net.Listen("tcp", d.Plan.Control)
	if err != nil {
		return fmt.Errorf("up: control listener: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /restart", func(w http.ResponseWriter, r *http.Request) {
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(token)) != 1 {
			http.Error(w, "the control token (DIR/control.token) is required", http.StatusUnauthorized)
			return
		}
		if err := d.Restart(r.Context(), r.URL.Query().Get("name")); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	// A restart waits for the process to stop and start again: no write
	// timeout, the caller's own bounds it.
	d.ctl = httpserve.New(mux, httpserve.Options{WriteTimeout: -1})
	go d.ctl.Serve(lis)
	return nil
}

// Stop sends SIGTERM to every child (brokers first, so they hand off), and
// SIGKILL to whatever is left after grace.
func (d *Deployment) Stop(grace time.Duration) {
	if d.ctl != nil {
		d.ctl.Close()
	}
	d.mu.Lock()
	procs := make(map[string]*exec.Cmd, len(d.procs))
	for k, v := range d.procs {
		procs[k] = v
	}
	d.mu.Unlock()
	order := []string{"broker", "bookie", "etcd", "global-etcd", "witness"}
	for _, role := range order {
		var waiting []*exec.Cmd
		for _, ps := range d.Plan.Procs {
			if c := procs[ps.Name]; c != nil && ps.Role == role && c.Process != nil {
				c.Process.Signal(syscall.SIGTERM)
				waiting = append(waiting, c)
			}
		}
		deadline := time.Now().Add(grace)
		for _, c := range waiting {
			for time.Now().Before(deadline) && processAlive(c.Process.Pid) {
				time.Sleep(50 * time.Millisecond)
			}
			if processAlive(c.Process.Pid) {
				c.Process.Signal(syscall.SIGKILL)
			}
		}
	}
}

func processAlive(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil {
		return false
	}
	// A zombie (exited, not yet reaped) still answers signal 0.
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	fields := strings.Fields(string(b))
	return len(fields) > 2 && fields[2] != "Z"
}

// RequestRestart asks a running `up` (found through DIR/endpoints.json) to
// restart one process.
func RequestRestart(dir, name string) error {
	b, err := os.ReadFile(filepath.Join(dir, "endpoints.json"))
	if err != nil {
		return fmt.Errorf("up: no running deployment in %s: %w", dir, err)
	}
	var e Endpoints
	if err := json.Unmarshal(b, &e); err != nil {
		return err
	}
	token, err := os.ReadFile(controlTokenFile(dir))
	if err != nil {
		return fmt.Errorf("up: control token: %w", err)
	}
	req, err := http.NewRequest(http.MethodPost, e.ControlURL+"/restart?name="+url.QueryEscape(name), nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
	c := http.Client{Timeout: 2 * time.Minute}
	resp, err := c.Do(req)
	if err != nil {
		return fmt.Errorf("up: control %s: %w", e.ControlURL, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		var sb strings.Builder
		buf := make([]byte, 4096)
		n, _ := resp.Body.Read(buf)
		sb.Write(buf[:n])
		return fmt.Errorf("up: restart %s: %s", name, strings.TrimSpace(sb.String()))
	}
	return nil
}
