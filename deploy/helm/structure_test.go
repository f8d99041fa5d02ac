package helmtest

import (
	"fmt"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
)

// workload is a StatefulSet's (or Deployment's) pod template.
type workload struct {
	object
	replicas    int
	serviceName string // StatefulSet's governing Service
	template    *corev1.PodTemplateSpec
	claims      []corev1.PersistentVolumeClaim
}

// podName is the name of the workload's i-th pod (a StatefulSet's).
func (w workload) podName(i int) string { return fmt.Sprintf("%s-%d", w.name, i) }

type rendered struct {
	objs       []object
	workloads  []workload
	services   map[string]*corev1.Service
	configMaps map[string]*corev1.ConfigMap
	pdbs       []*policyv1.PodDisruptionBudget
	monitors   []*monitoringv1.ServiceMonitor
}

func newRendered(t *testing.T, objs []object) *rendered {
	r := &rendered{objs: objs, services: map[string]*corev1.Service{}, configMaps: map[string]*corev1.ConfigMap{}}
	seen := map[string]bool{}
	for _, o := range objs {
		if id := o.kind + "/" + o.name; seen[id] {
			t.Errorf("%s rendered twice", id)
		} else {
			seen[id] = true
		}
		switch v := o.obj.(type) {
		case *appsv1.StatefulSet:
			r.workloads = append(r.workloads, workload{object: o, replicas: int(deref(v.Spec.Replicas, 1)),
				serviceName: v.Spec.ServiceName, template: &v.Spec.Template, claims: v.Spec.VolumeClaimTemplates})
		case *appsv1.Deployment:
			r.workloads = append(r.workloads, workload{object: o, replicas: int(deref(v.Spec.Replicas, 1)), template: &v.Spec.Template})
		case *corev1.Service:
			r.services[v.Name] = v
		case *corev1.ConfigMap:
			r.configMaps[v.Name] = v
		case *policyv1.PodDisruptionBudget:
			r.pdbs = append(r.pdbs, v)
		case *monitoringv1.ServiceMonitor:
			r.monitors = append(r.monitors, v)
		}
	}
	return r
}

func deref[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}

func selects(t *testing.T, what string, sel *metav1.LabelSelector, set map[string]string) bool {
	t.Helper()
	if sel == nil {
		t.Errorf("%s: no selector", what)
		return false
	}
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		t.Errorf("%s: selector: %v", what, err)
		return false
	}
	if s.Empty() {
		t.Errorf("%s: an empty selector selects everything", what)
	}
	return s.Matches(labels.Set(set))
}

// checkStructure: what the API server would refuse, or what would render
// and do nothing (a selector of no pod, a port of no container).
func (r *rendered) checkStructure(t *testing.T) {
	for _, o := range r.objs {
		m := objectMeta(o.obj)
		for _, e := range validation.IsDNS1123Subdomain(m.Name) {
			t.Errorf("%s: name: %s", o, e)
		}
		checkLabels(t, o.String(), m.Labels)
	}
	for name, s := range r.services {
		for _, e := range validation.IsDNS1035Label(name) {
			t.Errorf("Service %s: name: %s", name, e)
		}
		var pods []workload
		for _, w := range r.workloads {
			if len(s.Spec.Selector) > 0 && labels.SelectorFromSet(s.Spec.Selector).Matches(labels.Set(w.template.Labels)) {
				pods = append(pods, w)
			}
		}
		if len(pods) == 0 {
			t.Errorf("Service %s selects no pod of the chart (selector %v)", name, s.Spec.Selector)
		}
		for _, p := range s.Spec.Ports {
			proto := deref(&p.Protocol, corev1.ProtocolTCP)
			if proto == "" {
				proto = corev1.ProtocolTCP
			}
			for _, w := range pods {
				if !hasTargetPort(w.template, p.TargetPort.String(), int(p.TargetPort.IntVal), proto) {
					t.Errorf("Service %s port %s: %s has no container port %s/%s", name, p.Name, w, p.TargetPort.String(), proto)
				}
			}
		}
	}
	for _, w := range r.workloads {
		sts, isSTS := w.obj.(*appsv1.StatefulSet)
		// A StatefulSet's pods carry controller-revision-hash=NAME-HASH (≤ 63).
		if isSTS && len(w.name) > 52 {
			t.Errorf("%s: a StatefulSet name longer than 52 characters", w)
		}
		for _, e := range validation.IsDNS1123Label(w.podName(0)) {
			t.Errorf("%s: pod name: %s", w, e)
		}
		checkLabels(t, w.String()+" pod template", w.template.Labels)
		var sel *metav1.LabelSelector
		if isSTS {
			sel = sts.Spec.Selector
			if svc, ok := r.services[w.serviceName]; !ok {
				t.Errorf("%s: serviceName %q is no rendered Service", w, w.serviceName)
			} else if !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(w.template.Labels)) {
				t.Errorf("%s: its serviceName %s does not select its pods", w, w.serviceName)
			}
		} else {
			sel = w.obj.(*appsv1.Deployment).Spec.Selector
		}
		if !selects(t, w.String(), sel, w.template.Labels) {
			t.Errorf("%s: the selector does not match the pod template's labels (the API server refuses it)", w)
		}
		for _, other := range r.workloads {
			if other.name != w.name && selects(t, w.String(), sel, other.template.Labels) {
				t.Errorf("%s: its selector also selects the pods of %s", w, other)
			}
		}
		checkPodSpec(t, w)
	}
	for _, p := range r.pdbs {
		n := 0
		for _, w := range r.workloads {
			if selects(t, "PodDisruptionBudget "+p.Name, p.Spec.Selector, w.template.Labels) {
				n++
			}
		}
		if n == 0 {
			t.Errorf("PodDisruptionBudget %s selects no pod of the chart", p.Name)
		}
		if (p.Spec.MaxUnavailable == nil) == (p.Spec.MinAvailable == nil) {
			t.Errorf("PodDisruptionBudget %s: want one of maxUnavailable and minAvailable", p.Name)
		}
	}
	for _, sm := range r.monitors {
		var svcs []*corev1.Service
		for _, s := range r.services {
			if selects(t, "ServiceMonitor "+sm.Name, &sm.Spec.Selector, s.Labels) {
				svcs = append(svcs, s)
			}
		}
		if len(svcs) == 0 {
			t.Errorf("ServiceMonitor %s selects no Service", sm.Name)
		}
		for _, ep := range sm.Spec.Endpoints {
			for _, s := range svcs {
				found := false
				for _, p := range s.Spec.Ports {
					found = found || p.Name == ep.Port
				}
				if !found {
					t.Errorf("ServiceMonitor %s: endpoint port %q is no port of Service %s", sm.Name, ep.Port, s.Name)
				}
			}
		}
	}
}

func checkLabels(t *testing.T, what string, l map[string]string) {
	t.Helper()
	for k, v := range l {
		for _, e := range validation.IsQualifiedName(k) {
			t.Errorf("%s: label key %q: %s", what, k, e)
		}
		for _, e := range validation.IsValidLabelValue(v) {
			t.Errorf("%s: label %s=%q: %s", what, k, v, e)
		}
	}
}

func hasTargetPort(tpl *corev1.PodTemplateSpec, name string, num int, proto corev1.Protocol) bool {
	for _, c := range tpl.Spec.Containers {
		for _, p := range c.Ports {
			pp := p.Protocol
			if pp == "" {
				pp = corev1.ProtocolTCP
			}
			if pp == proto && (p.Name == name || (num != 0 && int(p.ContainerPort) == num)) {
				return true
			}
		}
	}
	return false
}

// downwardPaths are the fieldRef paths the downward API gives an env
// variable (labels and annotations by key).
var downwardPaths = []string{"metadata.name", "metadata.namespace", "metadata.uid", "spec.nodeName",
	"spec.serviceAccountName", "status.hostIP", "status.hostIPs", "status.podIP", "status.podIPs"}

func checkPodSpec(t *testing.T, w workload) {
	spec := &w.template.Spec
	vols := map[string]bool{}
	for _, v := range spec.Volumes {
		if vols[v.Name] {
			t.Errorf("%s: volume %s twice", w, v.Name)
		}
		vols[v.Name] = true
	}
	for _, c := range w.claims {
		vols[c.Name] = true
	}
	for _, c := range append(append([]corev1.Container{}, spec.InitContainers...), spec.Containers...) {
		what := fmt.Sprintf("%s container %s", w, c.Name)
		ports := map[string]bool{}
		for _, p := range c.Ports {
			for _, e := range validation.IsValidPortName(p.Name) {
				t.Errorf("%s: port name %q: %s", what, p.Name, e)
			}
			if ports[p.Name] {
				t.Errorf("%s: port name %q twice", what, p.Name)
			}
			ports[p.Name] = true
		}
		for _, m := range c.VolumeMounts {
			if !vols[m.Name] {
				t.Errorf("%s: mounts %s, which is no volume", what, m.Name)
			}
		}
		for _, e := range c.Env {
			for _, msg := range validation.IsEnvVarName(e.Name) {
				t.Errorf("%s: env %s: %s", what, e.Name, msg)
			}
			if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
				p := e.ValueFrom.FieldRef.FieldPath
				ok := strings.HasPrefix(p, "metadata.labels['") || strings.HasPrefix(p, "metadata.annotations['")
				for _, d := range downwardPaths {
					ok = ok || p == d
				}
				if !ok {
					t.Errorf("%s: env %s: fieldRef %q is not one the downward API gives", what, e.Name, p)
				}
			}
		}
		if c.Resources.Requests.Memory().IsZero() {
			t.Errorf("%s: no memory request", what)
		}
		for _, pr := range []*corev1.Probe{c.LivenessProbe, c.ReadinessProbe} {
			if pr == nil {
				t.Errorf("%s: no liveness or no readiness probe", what)
			}
		}
	}
	if spec.EnableServiceLinks == nil || *spec.EnableServiceLinks {
		t.Logf("%s: service links on (the kubelet adds every Service's variables; the test adds them too)", w)
	}
}

// checkBookieBudget: the bookies' PodDisruptionBudget keeps an ack quorum
// writable: maxUnavailable = min(Qw - Qa, bookies - E), computed here from
// the quorums the brokers are given (their ConfigMap) and compared with
// the chart's and with the value set's expected figure.
func (r *rendered) checkBookieBudget(t *testing.T, cts []*container, want int) {
	bookies := 0
	for _, w := range r.workloads {
		if w.template.Labels["app.kubernetes.io/component"] == "bookie" {
			bookies += w.replicas
		}
	}
	var pdb *policyv1.PodDisruptionBudget
	for _, p := range r.pdbs {
		if p.Spec.Selector != nil && p.Spec.Selector.MatchLabels["app.kubernetes.io/component"] == "bookie" {
			pdb = p
		}
	}
	if pdb == nil || pdb.Spec.MaxUnavailable == nil {
		t.Fatalf("no bookie PodDisruptionBudget with maxUnavailable")
	}
	e, qw, qa := r.quorums(t, cts)
	calc := min(qw-qa, bookies-e)
	got := pdb.Spec.MaxUnavailable.IntValue()
	if got != calc || got != want {
		t.Errorf("bookie PodDisruptionBudget maxUnavailable=%d; E=%d Qw=%d Qa=%d over %d bookies want min(Qw-Qa, bookies-E)=%d (the set expects %d)",
			got, e, qw, qa, bookies, calc, want)
	}
	if got < 1 {
		t.Errorf("bookie PodDisruptionBudget maxUnavailable=%d blocks every drain", got)
	}
}
