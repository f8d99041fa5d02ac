// Package helmtest checks the Helm chart deploy/helm/meridian as far as a
// machine without a Kubernetes cluster can (make test-helm):
//
//  1. render it with `helm template` for every value set below (HELMTEST_HELM
//     names the helm binary);
//  2. decode every rendered object strictly into its Kubernetes API type
//     (unknown or duplicate fields fail) and check what the API server and
//     the controllers would refuse or silently get wrong: names, labels,
//     selectors that match no pod, Services whose target ports no container
//     has, StatefulSets whose serviceName is no Service, mounts of no
//     volume, env names, downward-API paths;
//  3. run `meridian <role> --print-config` (HELMTEST_MERIDIAN names the
//     binary) with each Meridian container's arguments, its environment as
//     the kubelet would build it and the ConfigMap mounted where the pod
//     mounts it: every flag and environment variable must be one the role
//     knows, every listener a container port, every probe's port a
//     listener, every in-cluster address a rendered Service;
//  4. for the default values, start the region's processes on loopback
//     (etcd from the chart's etcd arguments, through etcd's own main at the
//     version the product is built with; the bookie and the broker from
//     theirs, only addresses and data directories replaced) and send every
//     probe to the port its listener was moved to: the path must be served.
//
// It is a module of its own: the Kubernetes types stay out of the
// product's go.mod and out of its ./... package lists.
package helmtest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8syaml "k8s.io/apimachinery/pkg/util/yaml"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

const namespace = "meridian"

// valueSet is one way to install the chart.
type valueSet struct {
	name    string
	release string
	files   []string // -f, relative to deploy/helm
	// budget is the bookies' PodDisruptionBudget maxUnavailable the
	// quorums of the set call for: min(Qw - Qa, bookies - E).
	budget int
	// live: start the processes (plain http, chart-managed etcd).
	live bool
}

var valueSets = []valueSet{
	// Release "meridian": its Services are named meridian-broker-…, whose
	// service links would fall in the broker section's variables.
	{name: "default", release: "meridian", budget: 1, live: true}, // 4 bookies, E=3 Qw=3 Qa=2: min(1, 1)
	{name: "east", release: "meridian-east", files: []string{"examples/east.yaml"}, budget: 1},
	{name: "west", release: "meridian-west", files: []string{"examples/west.yaml"}, budget: 1},
	{name: "quorum", release: "meridian", files: []string{"testdata/quorum.yaml"}, budget: 2}, // 6 bookies, E=4 Qw=3 Qa=1: min(2, 2)
}

func TestChart(t *testing.T) {
	meridian := need(t, "HELMTEST_MERIDIAN")
	for _, vs := range valueSets {
		t.Run(vs.name, func(t *testing.T) {
			objs := render(t, vs)
			r := newRendered(t, objs)
			r.checkStructure(t)
			cts := r.checkContainers(t, meridian)
			r.checkBookieBudget(t, cts, vs.budget)
			if vs.live {
				r.runLive(t, meridian, cts)
			}
		})
	}
}

// A set whose quorums leave no bookie to disrupt must not render (a
// budget of 0 would block every drain without a word).
func TestNoBudgetFailsToRender(t *testing.T) {
	_, err := helmTemplate(t, valueSet{release: "meridian", files: []string{"testdata/no-budget.yaml"}})
	if err == nil || !strings.Contains(err.Error(), "bookie disruption budget") {
		t.Fatalf("helm template with 3 bookies for E=3: want the disruption budget's error, got %v", err)
	}
}

func need(t *testing.T, env string) string {
	t.Helper()
	v := os.Getenv(env)
	if v == "" {
		t.Fatalf("%s is not set (make test-helm sets it)", env)
	}
	return v
}

func helmTemplate(t *testing.T, vs valueSet) ([]byte, error) {
	t.Helper()
	args := []string{"template", vs.release, "meridian", "--namespace", namespace}
	for _, f := range vs.files {
		args = append(args, "-f", f)
	}
	cmd := exec.Command(need(t, "HELMTEST_HELM"), args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("helm %s: %v: %s", strings.Join(args, " "), err, stderr.String())
	}
	return out, nil
}

// object is one rendered object, decoded.
type object struct {
	source string // the template it came from
	kind   string
	name   string
	obj    any
}

func (o object) String() string { return fmt.Sprintf("%s %s (%s)", o.kind, o.name, o.source) }

var sourceRE = regexp.MustCompile(`(?m)^# Source: (\S+)`)

func render(t *testing.T, vs valueSet) []object {
	t.Helper()
	out, err := helmTemplate(t, vs)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := decodeAll(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) == 0 {
		t.Fatal("helm template rendered nothing")
	}
	return objs
}

// decodeAll decodes every document of a rendered chart strictly into its
// Go type: a field the type does not have, or a key given twice, fails.
func decodeAll(out []byte) ([]object, error) {
	rd := k8syaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(out)))
	var objs []object
	var errs []error
	for {
		doc, err := rd.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		src := "?"
		if m := sourceRE.FindSubmatch(doc); m != nil {
			src = string(m[1])
		}
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &tm); err != nil {
			errs = append(errs, fmt.Errorf("%s: %v", src, err))
			continue
		}
		if tm.Kind == "" && tm.APIVersion == "" {
			if len(bytes.TrimSpace(stripComments(doc))) != 0 {
				errs = append(errs, fmt.Errorf("%s: a document without apiVersion and kind", src))
			}
			continue
		}
		obj, err := newObject(tm)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %v", src, err))
			continue
		}
		// As the API server reads it: YAML keys given twice refused, then
		// JSON decoded case-sensitively with unknown and duplicate fields
		// refused (encoding/json alone matches clusterIp to clusterIP).
		j, err := yaml.YAMLToJSONStrict(doc)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %v", src, err))
			continue
		}
		strict, err := kjson.UnmarshalStrict(j, obj)
		if err = errors.Join(append(strict, err)...); err != nil {
			errs = append(errs, fmt.Errorf("%s: %s %s does not decode strictly: %v", src, tm.APIVersion, tm.Kind, err))
			continue
		}
		objs = append(objs, object{source: src, kind: tm.Kind, name: objectMeta(obj).Name, obj: obj})
	}
	return objs, errors.Join(errs...)
}

func stripComments(doc []byte) []byte {
	var b bytes.Buffer
	for _, l := range strings.Split(string(doc), "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			b.WriteString(l + "\n")
		}
	}
	return b.Bytes()
}

// newObject is the Go type of every kind the chart renders; a kind not
// here fails the test (add its type, do not skip it).
func newObject(tm metav1.TypeMeta) (any, error) {
	switch tm.APIVersion + " " + tm.Kind {
	case "v1 ConfigMap":
		return &corev1.ConfigMap{}, nil
	case "v1 Service":
		return &corev1.Service{}, nil
	case "apps/v1 StatefulSet":
		return &appsv1.StatefulSet{}, nil
	case "apps/v1 Deployment":
		return &appsv1.Deployment{}, nil
	case "policy/v1 PodDisruptionBudget":
		return &policyv1.PodDisruptionBudget{}, nil
	case "monitoring.coreos.com/v1 ServiceMonitor":
		return &monitoringv1.ServiceMonitor{}, nil
	}
	return nil, fmt.Errorf("no Go type for %s %s in the test: add it", tm.APIVersion, tm.Kind)
}

func objectMeta(obj any) *metav1.ObjectMeta {
	switch o := obj.(type) {
	case *corev1.ConfigMap:
		return &o.ObjectMeta
	case *corev1.Service:
		return &o.ObjectMeta
	case *appsv1.StatefulSet:
		return &o.ObjectMeta
	case *appsv1.Deployment:
		return &o.ObjectMeta
	case *policyv1.PodDisruptionBudget:
		return &o.ObjectMeta
	case *monitoringv1.ServiceMonitor:
		return &o.ObjectMeta
	}
	panic(fmt.Sprintf("objectMeta: %T", obj))
}

// The strict decoding itself fails on what it should: a misspelt field
// and a key given twice (the kind of mistake a template makes).
func TestDecodeIsStrict(t *testing.T) {
	for name, doc := range map[string]string{
		"unknown field": "apiVersion: v1\nkind: Service\nmetadata: {name: a}\nspec: {clusterIp: None}\n",
		"duplicate key": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n  name: b\n",
		"unknown kind":  "apiVersion: v1\nkind: Sevrice\nmetadata: {name: a}\n",
		"wrong type":    "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a, labels: [x]}\n",
	} {
		if _, err := decodeAll([]byte(doc)); err == nil {
			t.Errorf("%s: decoded without an error", name)
		}
	}
}

// repoRoot is the product's root (deploy/helm/../..).
func repoRoot(t *testing.T) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(wd, "..", "..")
}
