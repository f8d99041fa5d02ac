package helmtest

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// meridianRoles are the roles of the binary (its ENTRYPOINT).
var meridianRoles = []string{"etcd", "bookie", "broker", "autorecovery", "standalone"}

// container is one container of a workload's first pod as the kubelet
// would start it.
type container struct {
	w    workload
	c    corev1.Container
	etcd bool     // upstream etcd (its own flags), not the Meridian image
	role string   // Meridian's role (args[0])
	args []string // after the role, $(VAR) expanded, --config pointed at a local copy
	env  []string // KEY=VALUE, as the kubelet builds it
	// eff is `meridian ROLE --print-config`'s effective configuration.
	eff effective
	// listeners: the rendered listen port → the setting (or etcd flag)
	// that listens on it.
	listeners map[int]string
}

func (c *container) String() string { return fmt.Sprintf("%s container %s", c.w, c.c.Name) }

// checkContainers checks every container against the binary it runs and
// returns them, for the live run.
func (r *rendered) checkContainers(t *testing.T, meridian string) []*container {
	var out []*container
	for _, w := range r.workloads {
		for _, c := range w.template.Spec.Containers {
			ct := r.prepare(t, w, c)
			if ct == nil {
				continue
			}
			if ct.etcd {
				r.checkEtcd(t, ct)
			} else {
				r.checkMeridian(t, ct, meridian)
			}
			out = append(out, ct)
		}
	}
	return out
}

// prepare builds the container's environment and arguments as the kubelet
// would for the workload's first pod.
func (r *rendered) prepare(t *testing.T, w workload, c corev1.Container) *container {
	ct := &container{w: w, c: c, listeners: map[int]string{}}
	switch {
	case len(c.Command) == 1 && path.Base(c.Command[0]) == "etcd":
		ct.etcd = true
	case len(c.Command) == 0 && len(c.Args) > 0 && slices.Contains(meridianRoles, c.Args[0]):
		ct.role = c.Args[0]
	default:
		t.Errorf("%s: neither the Meridian image's entrypoint with a role (%v) nor etcd: the test does not know what it runs", ct, meridianRoles)
		return nil
	}
	env, vars := r.podEnv(t, ct)
	ct.env = env
	args := c.Args
	if !ct.etcd {
		args = args[1:]
	}
	for i := 0; i < len(args); i++ {
		a := expand(args[i], vars)
		checkExpanded(t, ct, "argument "+args[i], a)
		if !ct.etcd && (a == "--config" || strings.HasPrefix(a, "--config=")) {
			p, ok := strings.CutPrefix(a, "--config=")
			if !ok && i+1 < len(args) {
				i++
				p = expand(args[i], vars)
			}
			a = "--config=" + r.configCopy(t, ct, p)
		}
		ct.args = append(ct.args, a)
	}
	return ct
}

// podEnv is the container's environment: the service links (unless the
// pod turns them off), then its env in order, each $(VAR) expanded
// against what comes before, as the kubelet does.
func (r *rendered) podEnv(t *testing.T, ct *container) ([]string, map[string]string) {
	vars := map[string]string{}
	var env []string
	add := func(k, v string) {
		vars[k] = v
		env = append(env, k+"="+v)
	}
	if sl := ct.w.template.Spec.EnableServiceLinks; sl == nil || *sl {
		for _, kv := range r.serviceLinks() {
			k, v, _ := strings.Cut(kv, "=")
			add(k, v)
		}
	}
	for _, e := range ct.c.Env {
		switch {
		case e.ValueFrom == nil:
			v := expand(e.Value, vars)
			checkExpanded(t, ct, "env "+e.Name, v)
			add(e.Name, v)
		case e.ValueFrom.FieldRef != nil:
			add(e.Name, ct.fieldRef(e.ValueFrom.FieldRef.FieldPath))
		case e.ValueFrom.ConfigMapKeyRef != nil:
			ref := e.ValueFrom.ConfigMapKeyRef
			cm, ok := r.configMaps[ref.Name]
			if !ok || cm.Data[ref.Key] == "" {
				t.Errorf("%s: env %s: ConfigMap %s key %s is not rendered", ct, e.Name, ref.Name, ref.Key)
			}
			add(e.Name, cm.Data[ref.Key])
		default:
			// Secrets reach Meridian as files (file:// and *_file keys).
			t.Errorf("%s: env %s: a valueFrom the test does not resolve", ct, e.Name)
		}
	}
	return env, vars
}

// fieldRef is a downward-API value for the workload's first pod. The
// zone label is what Kubernetes copies from the node onto the pod
// (PodTopologyLabelsAdmission).
func (ct *container) fieldRef(p string) string {
	switch p {
	case "metadata.name":
		return ct.w.podName(0)
	case "metadata.namespace":
		return namespace
	case "status.podIP", "status.hostIP":
		return "10.0.0.7"
	case "spec.nodeName":
		return "node-1"
	case "metadata.labels['topology.kubernetes.io/zone']":
		return "zone-a"
	}
	if v, ok := ct.w.template.Labels[strings.TrimSuffix(strings.TrimPrefix(p, "metadata.labels['"), "']")]; ok {
		return v
	}
	return "x"
}

// serviceLinks are the variables the kubelet gives every pod for every
// Service with a cluster IP in its namespace (enableServiceLinks).
func (r *rendered) serviceLinks() []string {
	var out []string
	for name, s := range r.services {
		if s.Spec.ClusterIP == corev1.ClusterIPNone || len(s.Spec.Ports) == 0 {
			continue
		}
		n := strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
		p := s.Spec.Ports[0]
		proto := strings.ToUpper(string(p.Protocol))
		if proto == "" {
			proto = "TCP"
		}
		out = append(out, n+"_SERVICE_HOST=10.96.0.10", fmt.Sprintf("%s_SERVICE_PORT=%d", n, p.Port),
			fmt.Sprintf("%s_PORT=%s://10.96.0.10:%d", n, strings.ToLower(proto), p.Port))
		for _, p := range s.Spec.Ports {
			if p.Name != "" {
				out = append(out, fmt.Sprintf("%s_SERVICE_PORT_%s=%d", n, strings.ToUpper(strings.ReplaceAll(p.Name, "-", "_")), p.Port))
			}
			out = append(out, fmt.Sprintf("%s_PORT_%d_%s=tcp://10.96.0.10:%d", n, p.Port, proto, p.Port))
		}
	}
	slices.Sort(out)
	return out
}

// expand does the kubelet's $(VAR) expansion: $(NAME) of a variable
// defined before becomes its value, $$ a $, anything else stays.
func expand(s string, vars map[string]string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '$' && i+1 < len(s) {
			if s[i+1] == '$' {
				b.WriteByte('$')
				i++
				continue
			}
			if s[i+1] == '(' {
				if j := strings.IndexByte(s[i+2:], ')'); j >= 0 {
					if v, ok := vars[s[i+2:i+2+j]]; ok {
						b.WriteString(v)
						i += 2 + j
						continue
					}
				}
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

var unexpandedRE = regexp.MustCompile(`\$\([A-Za-z_][A-Za-z0-9_]*\)`)

// A $(VAR) left after expansion names no variable defined before it: the
// process would get it literally.
func checkExpanded(t *testing.T, ct *container, what, v string) {
	t.Helper()
	if m := unexpandedRE.FindString(v); m != "" {
		t.Errorf("%s: %s: %s names no variable defined before it", ct, what, m)
	}
}

// mountFor returns the container's mount holding file p and the volume.
func (ct *container) mountFor(p string) (*corev1.VolumeMount, *corev1.Volume, string) {
	var best *corev1.VolumeMount
	for i, m := range ct.c.VolumeMounts {
		if strings.HasPrefix(p, strings.TrimSuffix(m.MountPath, "/")+"/") && (best == nil || len(m.MountPath) > len(best.MountPath)) {
			best = &ct.c.VolumeMounts[i]
		}
	}
	if best == nil {
		return nil, nil, ""
	}
	rel := strings.TrimPrefix(p, strings.TrimSuffix(best.MountPath, "/")+"/")
	for i, v := range ct.w.template.Spec.Volumes {
		if v.Name == best.Name {
			return best, &ct.w.template.Spec.Volumes[i], rel
		}
	}
	return best, nil, rel // a volumeClaimTemplate
}

// configCopy writes the ConfigMap key mounted at p (in the container) to
// a local file and returns its path.
func (r *rendered) configCopy(t *testing.T, ct *container, p string) string {
	m, v, rel := ct.mountFor(p)
	if m == nil || v == nil || v.ConfigMap == nil {
		t.Errorf("%s: --config %s is on no ConfigMap the pod mounts", ct, p)
		return p
	}
	data, ok := r.configMaps[v.ConfigMap.Name].Data[rel]
	if !ok {
		t.Errorf("%s: --config %s: ConfigMap %s has no key %s", ct, p, v.ConfigMap.Name, rel)
	}
	dir := filepath.Join(t.TempDir(), ct.w.name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	local := filepath.Join(dir, path.Base(p))
	if err := os.WriteFile(local, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	return local
}

// containerPort resolves a probe's port (a name or a number).
func (ct *container) containerPort(name string, num int) int {
	for _, p := range ct.c.Ports {
		if (name != "" && p.Name == name) || (num != 0 && int(p.ContainerPort) == num) {
			return int(p.ContainerPort)
		}
	}
	return 0
}

type probe struct {
	kind string // startup, liveness, readiness
	*corev1.Probe
}

func (ct *container) probes() []probe {
	var out []probe
	for _, p := range []probe{{"startup", ct.c.StartupProbe}, {"liveness", ct.c.LivenessProbe}, {"readiness", ct.c.ReadinessProbe}} {
		if p.Probe != nil {
			out = append(out, p)
		}
	}
	return out
}

// probePaths: what each probe of a Meridian role must ask (issue 28).
var probePaths = map[string]string{"startup": "/healthz", "liveness": "/healthz", "readiness": "/readyz"}

// checkMeridian runs `meridian ROLE ... --print-config` with the
// container's arguments and environment: the binary validates every value
// and refuses an unknown key or variable of a config section; the test
// then holds the chart to the role's own names (a variable another role
// knows is accepted by the binary but ignored by this role).
func (r *rendered) checkMeridian(t *testing.T, ct *container, meridian string) {
	cmd := exec.Command(meridian, append(append([]string{ct.role}, ct.args...), "--print-config")...)
	cmd.Env = ct.env
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Errorf("%s: meridian %s --print-config with the rendered arguments and environment: %v\n%s", ct, ct.role, err, out)
		return
	}
	eff, err := parsePrintConfig(string(out))
	if err != nil {
		t.Errorf("%s: %v", ct, err)
		return
	}
	ct.eff = eff
	envs, flags := map[string]setting{}, map[string]bool{"config": true}
	for _, s := range eff {
		envs[s.env] = s
		flags[s.flag] = true
	}
	for _, e := range ct.c.Env {
		if !strings.HasPrefix(e.Name, "MERIDIAN_") {
			continue
		}
		s, ok := envs[e.Name]
		switch {
		case !ok:
			t.Errorf("%s: env %s is no setting of meridian %s (--print-config does not list it)", ct, e.Name, ct.role)
		case s.source != "env":
			t.Errorf("%s: env %s: %s's value comes from %q, not the environment", ct, e.Name, s.key, s.source)
		}
	}
	for _, a := range ct.args {
		if name, ok := strings.CutPrefix(a, "--"); ok {
			name, _, _ = strings.Cut(name, "=")
			if !flags[name] {
				t.Errorf("%s: flag --%s is no flag of meridian %s", ct, name, ct.role)
			}
		}
	}
	// Listeners: every listen address a container port, every TCP
	// container port a listener; advertised addresses reachable names.
	tls := eff.value("security.tls.cert_file") != ""
	for _, s := range eff {
		if !strings.HasSuffix(lastPart(s.key), "addr") || s.value == "" {
			continue
		}
		host, port, err := net.SplitHostPort(s.value)
		if err != nil {
			t.Errorf("%s: %s=%q: %v", ct, s.key, s.value, err)
			continue
		}
		p, _ := strconv.Atoi(port)
		if strings.Contains(s.key, "advertise") {
			if ip := net.ParseIP(host); host == "localhost" || (ip != nil && (ip.IsLoopback() || ip.IsUnspecified())) {
				t.Errorf("%s: %s=%s advertises an address no other pod can reach", ct, s.key, s.value)
			}
			r.checkInClusterAddr(t, ct, s.key, s.value)
			continue
		}
		if host != "0.0.0.0" && host != "" && host != "::" {
			t.Errorf("%s: %s=%s listens on %s only: the pod's address would not be served", ct, s.key, s.value, host)
		}
		if prev, dup := ct.listeners[p]; dup {
			t.Errorf("%s: %s and %s both listen on port %d", ct, prev, s.key, p)
		}
		ct.listeners[p] = s.key
		if ct.containerPort("", p) == 0 {
			t.Errorf("%s: %s listens on port %d, which no container port declares", ct, s.key, p)
		}
	}
	for _, cp := range ct.c.Ports {
		if _, ok := ct.listeners[int(cp.ContainerPort)]; !ok {
			t.Errorf("%s: container port %s (%d) is no listener of meridian %s", ct, cp.Name, cp.ContainerPort, ct.role)
		}
	}
	for _, pr := range ct.probes() {
		g := pr.HTTPGet
		if g == nil {
			t.Errorf("%s: %s probe: want httpGet on the role's /healthz or /readyz", ct, pr.kind)
			continue
		}
		p := ct.containerPort(g.Port.StrVal, int(g.Port.IntVal))
		key, ok := ct.listeners[p]
		switch {
		case p == 0:
			t.Errorf("%s: %s probe port %s is no container port", ct, pr.kind, g.Port.String())
		case !ok:
			t.Errorf("%s: %s probe port %d is no listener of meridian %s", ct, pr.kind, p, ct.role)
		case g.Path != probePaths[pr.kind]:
			t.Errorf("%s: %s probe asks %s, want %s", ct, pr.kind, g.Path, probePaths[pr.kind])
		default:
			t.Logf("%s: %s probe %s on port %d: %s", ct, pr.kind, g.Path, p, key)
		}
		if want := map[bool]corev1.URIScheme{false: corev1.URISchemeHTTP, true: corev1.URISchemeHTTPS}[tls]; g.Scheme != want && !(g.Scheme == "" && !tls) {
			t.Errorf("%s: %s probe scheme %s, want %s (TLS %v: every listener is TLS)", ct, pr.kind, g.Scheme, want, tls)
		}
	}
	// Files the settings name lie on volumes the container mounts.
	for _, s := range eff {
		f, isURL := strings.CutPrefix(s.value, "file://")
		if !strings.HasPrefix(f, "/") || !(isURL || strings.HasSuffix(s.key, "_file") || strings.HasSuffix(s.key, "data_dir")) {
			continue
		}
		m, _, _ := ct.mountFor(f)
		if m == nil {
			t.Errorf("%s: %s=%s is on no volume the container mounts", ct, s.key, s.value)
			continue
		}
		if strings.HasSuffix(s.key, "data_dir") && m.ReadOnly {
			t.Errorf("%s: %s=%s is on a read-only mount", ct, s.key, s.value)
		}
	}
	// The region's etcd, the global store and the gossip seeds: each
	// in-cluster name a rendered Service (and pod) with that port.
	for _, key := range []string{"metadata.endpoints", "metadata.global", "gossip.seeds"} {
		for _, ep := range splitList(eff.value(key)) {
			_, ep, _ = strings.Cut(ep, "=") // REGION=URL
			if ep == "" {
				continue
			}
			if u, err := url.Parse(ep); err == nil && u.Host != "" {
				ep = u.Host
			}
			r.checkInClusterAddr(t, ct, key, ep)
		}
	}
	if ct.role == "bookie" && eff.value("bookie.rack") == "" {
		t.Errorf("%s: bookie.rack is empty: an enforced rack-aware policy would not place on it", ct)
	}
}

func splitList(v string) []string {
	var out []string
	for _, p := range strings.Split(v, ",") {
		if p = strings.TrimSpace(p); p != "" {
			if !strings.Contains(p, "=") {
				p = "=" + p
			}
			out = append(out, p)
		}
	}
	return out
}

func lastPart(key string) string { return key[strings.LastIndex(key, ".")+1:] }

// checkInClusterAddr: an address under NAMESPACE.svc.DOMAIN is a rendered
// Service with that port — SERVICE.NS.svc.DOMAIN — or a pod of a
// StatefulSet governed by that Service — POD.SERVICE.NS.svc.DOMAIN.
// Other names (another cluster's, a witness's) are outside the test.
func (r *rendered) checkInClusterAddr(t *testing.T, ct *container, key, hostport string) {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		t.Errorf("%s: %s: %q: %v", ct, key, hostport, err)
		return
	}
	p, _ := strconv.Atoi(port)
	rest, ok := strings.CutSuffix(host, "."+namespace+".svc.cluster.local")
	if !ok {
		if strings.HasSuffix(host, ".svc.cluster.local") {
			t.Errorf("%s: %s: %s is in another namespace than the release's (%s)", ct, key, host, namespace)
		}
		return
	}
	labels := strings.Split(rest, ".")
	svcName := labels[len(labels)-1]
	svc, ok := r.services[svcName]
	if !ok {
		t.Errorf("%s: %s: %s names Service %s, which the chart does not render", ct, key, hostport, svcName)
		return
	}
	if len(labels) == 2 {
		found := false
		for _, w := range r.workloads {
			for i := range w.replicas {
				found = found || (w.serviceName == svcName && w.podName(i) == labels[0])
			}
		}
		if !found {
			t.Errorf("%s: %s: %s: no StatefulSet governed by %s has a pod %s", ct, key, hostport, svcName, labels[0])
		}
		if svc.Spec.ClusterIP != corev1.ClusterIPNone {
			t.Errorf("%s: %s: %s: pod names need a headless Service, %s is not", ct, key, hostport, svcName)
		}
	}
	if len(labels) > 2 {
		t.Errorf("%s: %s: %s is no Service or pod name", ct, key, hostport)
	}
	for _, sp := range svc.Spec.Ports {
		if int(sp.Port) == p {
			return
		}
	}
	t.Errorf("%s: %s: Service %s has no port %d", ct, key, svcName, p)
}

// checkEtcd: the upstream etcd container's flags are etcd's (its own
// main, at the version the product is built with, parses them: an
// unknown flag or a bad value exits 2), its image is that version, and
// its probes ask a port one of its --listen-*-urls serves.
func (r *rendered) checkEtcd(t *testing.T, ct *container) {
	want := "v" + etcdVersion(t)
	if img := ct.c.Image; !strings.HasSuffix(img, ":"+want) {
		t.Errorf("%s: image %s, want etcd %s (go.etcd.io/etcd/server/v3 in the product's go.mod)", ct, img, want)
	}
	args := slices.Clone(ct.args)
	for _, kv := range ct.env {
		if k, v, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "ETCD_") {
			args = append(args, "--"+strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(k, "ETCD_")), "_", "-")+"="+v)
		}
	}
	cmd := exec.Command(os.Args[0], append(args, "--version")...)
	cmd.Env = append(slices.Clone(ct.env), asEtcd+"=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("%s: etcd %s --version: %v\n%s", ct, strings.Join(args, " "), err, out)
	}
	for _, a := range ct.args {
		name, v, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if !strings.HasPrefix(name, "listen-") {
			continue
		}
		for _, u := range strings.Split(v, ",") {
			pu, err := url.Parse(u)
			if err != nil {
				t.Errorf("%s: --%s: %v", ct, name, err)
				continue
			}
			p, _ := strconv.Atoi(pu.Port())
			ct.listeners[p] = "--" + name
		}
	}
	for _, pr := range ct.probes() {
		g := pr.HTTPGet
		if g == nil {
			t.Errorf("%s: %s probe: want httpGet", ct, pr.kind)
			continue
		}
		p := ct.containerPort(g.Port.StrVal, int(g.Port.IntVal))
		if _, ok := ct.listeners[p]; !ok {
			t.Errorf("%s: %s probe port %s (%d) is none of etcd's --listen-*-urls", ct, pr.kind, g.Port.String(), p)
		}
	}
	for _, cp := range ct.c.Ports {
		if _, ok := ct.listeners[int(cp.ContainerPort)]; !ok {
			t.Errorf("%s: container port %s (%d) is none of etcd's --listen-*-urls", ct, cp.Name, cp.ContainerPort)
		}
	}
}

var goModEtcdRE = regexp.MustCompile(`(?m)^\s*go\.etcd\.io/etcd/server/v3 v(\S+)`)

// etcdVersion is the etcd server the product is built with; the test's
// own etcd main must be the same.
func etcdVersion(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	m := goModEtcdRE.FindSubmatch(b)
	if m == nil {
		t.Fatal("the product's go.mod requires no go.etcd.io/etcd/server/v3")
	}
	v := string(m[1])
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == "go.etcd.io/etcd/server/v3" && d.Version != "v"+v {
				t.Fatalf("the test's etcd is %s, the product's v%s: align deploy/helm/go.mod", d.Version, v)
			}
		}
	}
	return v
}

// r.quorums are the brokers' ledger quorums (their effective config).
func (r *rendered) quorums(t *testing.T, cts []*container) (e, qw, qa int) {
	t.Helper()
	for _, ct := range cts {
		if ct.role == "broker" && ct.eff != nil {
			n := func(k string) int {
				v, err := strconv.Atoi(ct.eff.value(k))
				if err != nil {
					t.Fatalf("%s: %s: %v", ct, k, err)
				}
				return v
			}
			return n("broker.ensemble_size"), n("broker.write_quorum"), n("broker.ack_quorum")
		}
	}
	t.Fatal("no broker's effective configuration")
	return
}
