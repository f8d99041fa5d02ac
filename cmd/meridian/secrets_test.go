package main

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// A key written over an existing file readable by others never lands in
// that file: whoever held the old file open (or a hard link to it) reads
// the old bytes, and path ends 0600 with the key.
func TestWriteSecretReplacesAnExistingFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "secret.key")
	if err := os.WriteFile(path, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	held, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	if err := writeSecret(path, []byte("the key")); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", st.Mode().Perm())
	}
	if b, _ := os.ReadFile(path); string(b) != "the key" {
		t.Errorf("path holds %q", b)
	}
	if b, _ := io.ReadAll(held); string(b) != "old" {
		t.Errorf("the file that was readable by others now reads %q: the key was written into it", b)
	}
	left, _ := filepath.Glob(filepath.Join(filepath.Dir(path), ".secret.key.tmp-*"))
	if len(left) != 0 {
		t.Errorf("temporary files left: %v", left)
	}
}

// The profiling listener's address file is the owner's only, and it does
// not serve the command line (flags' values may be secrets).
func TestPprofHidesCommandLine(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(pprofDirEnv, dir)
	startPprof()
	f := filepath.Join(dir, strconv.Itoa(os.Getpid())+".addr")
	st, err := os.Stat(f)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("address file mode %v, want 0600", st.Mode().Perm())
	}
	addr, _ := os.ReadFile(f)
	resp, err := http.Get("http://" + strings.TrimSpace(string(addr)) + "/debug/pprof/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode == http.StatusOK || strings.Contains(string(body), os.Args[0]) {
		t.Errorf("/debug/pprof/cmdline answered %d: %q", resp.StatusCode, body)
	}
}
