package testutil

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// Every package with tests is tested by a CI target (the Makefile's
// RACE_PKGS or PROC_PKGS): a package added without a line there had its
// tests run by no CI (internal/grpcpool's and tools/bench's once did).
func TestEveryTestedPackageRunsInCI(t *testing.T) {
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	out, err := exec.Command("make", "-s", "-C", root, "print-test-pkgs").Output()
	if err != nil {
		t.Fatalf("make print-test-pkgs: %v", err)
	}
	list := func(args ...string) []string {
		cmd := exec.Command("go", append([]string{"list", "-f", "{{if or .TestGoFiles .XTestGoFiles}}{{.ImportPath}}{{end}}"}, args...)...)
		cmd.Dir = root
		b, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list %v: %v", args, err)
		}
		return strings.Fields(string(b))
	}
	inCI := list(strings.Fields(string(out))...)
	for _, p := range list("./...") {
		if !slices.Contains(inCI, p) {
			t.Errorf("%s has tests that no CI target runs: add it to RACE_PKGS (pure) or PROC_PKGS (real processes) in the Makefile", p)
		}
	}
}
