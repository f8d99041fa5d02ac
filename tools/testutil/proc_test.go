package testutil

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
)

// MeridianBinary's build directories are named by their test binary's
// pid, and a new test binary removes those of test binaries no longer
// running — and only those: a running one's binary stays.
func TestDeadTestBinariesBuildsAreRemoved(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	done := exec.Command("true")
	if err := done.Run(); err != nil {
		t.Fatal(err)
	}
	dead := filepath.Join(tmp, binDirPrefix+strconv.Itoa(done.Process.Pid))
	live := filepath.Join(tmp, binDirPrefix+strconv.Itoa(os.Getppid()))
	other := filepath.Join(tmp, "meridian-bin-12345")
	for _, d := range []string{dead, live, other} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "meridian"), []byte("x"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	removeDeadBuilds()
	if _, err := os.Stat(dead); !os.IsNotExist(err) {
		t.Errorf("the build of a test binary that exited is still there (%v)", err)
	}
	for _, d := range []string{live, other} {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("%s was removed: %v", d, err)
		}
	}
}
