package broker_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The broker's house (DESIGN.md, "Inside broker/"): the root only wires
// the rooms; each room depends on interfaces it declares, never on the
// root or a sibling; the shared floor below them (meta, entry, codec,
// mledger) imports no room. Product code only: tests may import what
// they exercise.
const module = "github.com/meridian-mq/meridian"

var (
	rooms = []string{"broker/admin", "broker/security", "broker/failoverctl", "broker/replication", "broker/stretched", "broker/dispatch", "broker/access"}
	floor = []string{"broker/meta", "broker/entry", "broker/codec", "broker/mledger"}
	// The composition root is imported only by the binary that wires it
	// and the tools that run it in process.
	rootImporters = []string{"cmd/meridian", "tools/bench"}
)

// productImports returns, by package directory (relative to the module
// root), the module's packages its non-test files import.
func productImports(t *testing.T) map[string][]string {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); path != root && (strings.HasPrefix(n, ".") || n == "testdata" || n == "bin" || n == "data") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		dir, _ := filepath.Rel(root, filepath.Dir(path))
		for _, im := range f.Imports {
			p, _ := strconv.Unquote(im.Path.Value)
			if rel, ok := strings.CutPrefix(p, module+"/"); ok && !slices.Contains(out[dir], rel) {
				out[dir] = append(out[dir], rel)
			}
		}
		if _, ok := out[dir]; !ok {
			out[dir] = nil
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestBrokerRoomsImportNoSiblingAndNotTheRoot(t *testing.T) {
	imports := productImports(t)
	for _, room := range rooms {
		if _, ok := imports[room]; !ok {
			t.Fatalf("room %s not found", room)
		}
		for _, p := range imports[room] {
			if p == "broker" || (slices.Contains(rooms, p) && p != room) {
				t.Errorf("room %s imports %s: a room depends on interfaces it declares, not on the root or a sibling", room, p)
			}
		}
	}
}

func TestBrokerFloorImportsNoRoom(t *testing.T) {
	imports := productImports(t)
	for _, pkg := range floor {
		for _, p := range imports[pkg] {
			if p == "broker" || slices.Contains(rooms, p) {
				t.Errorf("%s imports %s: the floor every room stands on imports no room", pkg, p)
			}
		}
	}
}

func TestOnlyTheBinaryAndToolsImportTheCompositionRoot(t *testing.T) {
	imports := productImports(t)
	for dir, ps := range imports {
		if slices.Contains(ps, "broker") && !slices.Contains(rootImporters, dir) {
			t.Errorf("%s imports the broker's composition root", dir)
		}
	}
}

// The pure cores (DESIGN.md: "no etcd, no sockets, no clocks inside")
// link no infrastructure: neither the metadata store, gossip, storage
// nor gRPC.
func TestPureCoresLinkNoInfrastructure(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	banned := []string{"go.etcd.io/", "github.com/hashicorp/serf", "github.com/hashicorp/memberlist", "github.com/cockroachdb/pebble", "google.golang.org/grpc"}
	for _, pkg := range []string{"rack", "replicator", "failover", "cluster/health", "bookie/digest", "broker/dispatch"} {
		cmd := exec.Command("go", "list", "-deps", "./"+pkg)
		cmd.Dir = ".."
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps ./%s: %v\n%s", pkg, err, out)
		}
		for _, dep := range strings.Fields(string(out)) {
			for _, b := range banned {
				if strings.HasPrefix(dep, b) {
					t.Errorf("the pure core %s links %s", pkg, dep)
				}
			}
		}
	}
}

// The dispatch core imports nothing of the module (its Position has
// mledger.Position's fields instead): the subscription shell drives it.
func TestDispatchCoreImportsNothingOfTheModule(t *testing.T) {
	imports := productImports(t)
	if _, ok := imports["broker/dispatch"]; !ok {
		t.Fatal("broker/dispatch not found")
	}
	if ps := imports["broker/dispatch"]; len(ps) > 0 {
		t.Errorf("broker/dispatch imports %v", ps)
	}
}

// The sanity of the check itself: it sees the imports it must see.
func TestLayoutCheckSeesImports(t *testing.T) {
	imports := productImports(t)
	if !slices.Contains(imports["cmd/meridian"], "broker") || !slices.Contains(imports["broker"], "broker/replication") {
		t.Fatalf("the import walk missed known imports: cmd/meridian %v, broker %v", imports["cmd/meridian"], imports["broker"])
	}
	if _, err := os.Stat(filepath.Join("..", "go.mod")); err != nil {
		t.Fatal(err)
	}
}

// internal/ holds the low-level libraries every layer may use (tokens,
// TLS, gRPC buffers, clocks, ports, rate-limited logs), tools/ what sits
// above everything (the deployment runner, benchmarks, test harnesses,
// fault proxies). So an internal library imports no other package of the
// module but internal ones, and no product package imports a tool: only
// the binary, the drills and other tools do (tests may import either).
func TestLibrariesAndToolsKeepTheirSides(t *testing.T) {
	imports := productImports(t)
	toolUsers := []string{"cmd/", "tools/", "drill"}
	for dir, ps := range imports {
		for _, p := range ps {
			if strings.HasPrefix(dir, "internal/") && !strings.HasPrefix(p, "internal/") {
				t.Errorf("the library %s imports %s, which sits above it", dir, p)
			}
			if strings.HasPrefix(p, "tools/") && !slices.ContainsFunc(toolUsers, func(u string) bool { return strings.HasPrefix(dir, u) }) {
				t.Errorf("the product package %s imports the tool %s", dir, p)
			}
		}
	}
	if !slices.Contains(imports["tools/bench"], "broker") || !slices.Contains(imports["bookie"], "internal/grpcpool") {
		t.Fatalf("the import walk missed known imports: tools/bench %v, bookie %v", imports["tools/bench"], imports["bookie"])
	}
}

// maxBrokerMethods bounds the composition root's Broker type: what it
// does beyond wiring belongs on a type of its own (a room's host, the
// connection table, a topic), where a reader finds it by its name.
const maxBrokerMethods = 40

// TestBrokerStaysUnderItsMethodBound counts the methods declared on Broker
// in the root's product files.
func TestBrokerStaysUnderItsMethodBound(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var methods []string
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Recv == nil || len(fd.Recv.List) != 1 {
				continue
			}
			rt := fd.Recv.List[0].Type
			if st, ok := rt.(*ast.StarExpr); ok {
				rt = st.X
			}
			if id, ok := rt.(*ast.Ident); ok && id.Name == "Broker" {
				methods = append(methods, path+": "+fd.Name.Name)
			}
		}
	}
	if len(methods) < 20 {
		t.Fatalf("found only %d Broker methods: the count misses some (%v)", len(methods), methods)
	}
	if len(methods) >= maxBrokerMethods {
		t.Errorf("Broker has %d methods, the bound is under %d: move some onto the type they belong to\n%s",
			len(methods), maxBrokerMethods, strings.Join(methods, "\n"))
	}
	t.Logf("Broker has %d methods", len(methods))
}
