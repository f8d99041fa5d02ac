package replicator_test

import (
	"os/exec"
	"strings"
	"testing"
)

// The replicator core is pure (doc.go: "no I/O, sockets, clocks,
// goroutines or logging"): it links no network, gRPC, protocol or
// metadata-store package; the gRPC transport lives beside it in
// replicator/transport, which, like the core, never imports the broker
// (DESIGN.md: "replicator/ never imports broker/").
const module = "github.com/meridian-mq/meridian"

// deps lists the packages pkg links (go list -deps).
func deps(t *testing.T, pkg string) []string {
	t.Helper()
	if testing.Short() {
		t.Skip("runs go list")
	}
	cmd := exec.Command("go", "list", "-deps", pkg)
	cmd.Dir = ".."
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
	}
	return strings.Fields(string(out))
}

func TestCoreLinksNoTransport(t *testing.T) {
	banned := []string{"net", "google.golang.org/grpc", "go.etcd.io/", module + "/proto/", module + "/cluster", module + "/replicator/transport"}
	for _, dep := range deps(t, "./replicator") {
		for _, b := range banned {
			if dep == b || strings.HasPrefix(dep, strings.TrimSuffix(b, "/")+"/") {
				t.Errorf("the pure core replicator links %s", dep)
			}
		}
	}
}

func TestTransportImportsNoBroker(t *testing.T) {
	ds := deps(t, "./replicator/transport")
	for _, dep := range ds {
		if dep == module+"/broker" || strings.HasPrefix(dep, module+"/broker/") {
			t.Errorf("replicator/transport links %s: it declares what it needs of a topic (Target)", dep)
		}
	}
	// The check sees what it must see.
	found := false
	for _, dep := range ds {
		found = found || dep == "google.golang.org/grpc"
	}
	if !found {
		t.Fatalf("go list -deps ./replicator/transport misses google.golang.org/grpc: %v", ds)
	}
}
