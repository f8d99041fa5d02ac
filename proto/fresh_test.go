package proto_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// pinned must match the Makefile's generator versions.
var pinned = map[string]string{
	"protoc-gen-go":      "v1.36.12",
	"protoc-gen-go-grpc": "v1.6.0",
}

// TestGeneratedCodeIsFresh regenerates the Go code from the .proto files
// into a temporary directory with the pinned generators and compares it
// with the committed code. It needs protoc (Debian's protobuf-compiler,
// which .ci/run installs); the pinned generators are built with `go
// install` into a temporary GOBIN.
func TestGeneratedCodeIsFresh(t *testing.T) {
	if _, err := exec.LookPath("protoc"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("protoc not installed in CI: .ci/run must install protobuf-compiler")
		}
		t.Skip("protoc not installed; apt-get install protobuf-compiler to check generated code")
	}
	gobin := t.TempDir()
	for _, m := range []string{
		"google.golang.org/protobuf/cmd/protoc-gen-go@" + pinned["protoc-gen-go"],
		"google.golang.org/grpc/cmd/protoc-gen-go-grpc@" + pinned["protoc-gen-go-grpc"],
	} {
		cmd := exec.Command("go", "install", m)
		cmd.Env = append(os.Environ(), "GOBIN="+gobin)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go install %s: %v\n%s", m, err, out)
		}
	}
	out := t.TempDir()
	protos, _ := filepath.Glob("*/*.proto")
	args := append([]string{"-I", ".", "--go_out=" + out, "--go_opt=paths=source_relative",
		"--go-grpc_out=" + out, "--go-grpc_opt=paths=source_relative"}, protos...)
	cmd := exec.Command("protoc", args...)
	cmd.Env = append(os.Environ(), "PATH="+gobin+string(os.PathListSeparator)+os.Getenv("PATH"))
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("protoc: %v\n%s", err, b)
	}
	gen, _ := filepath.Glob(filepath.Join(out, "*", "*.go"))
	if len(gen) == 0 {
		t.Fatal("protoc generated nothing")
	}
	for _, g := range gen {
		rel, _ := filepath.Rel(out, g)
		want, err := os.ReadFile(g)
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(rel)
		if err != nil {
			t.Fatalf("generated file %s is not committed: run make proto", rel)
		}
		if !bytes.Equal(stripVersions(got), stripVersions(want)) {
			t.Errorf("%s is stale: run make proto", rel)
		}
	}
}

// stripVersions drops the "// - protoc vX" header line, which names the
// local protoc build rather than anything in the .proto files.
func stripVersions(b []byte) []byte {
	var keep []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "// \tprotoc ") || strings.HasPrefix(l, "// - protoc ") {
			continue
		}
		keep = append(keep, l)
	}
	return []byte(strings.Join(keep, "\n"))
}
