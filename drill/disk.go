package drill

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/meridian-mq/meridian/tools/up"
)

// smallDisk is a process's data directory on a tmpfs of its own, which a
// disk-full fault fills.
type smallDisk struct {
	dir  string
	fill string
}

const smallDiskSize = "256m"

func dataDirOf(ps up.ProcSpec) string {
	for i, a := range ps.Args {
		if a == "--data-dir" && i+1 < len(ps.Args) {
			return ps.Args[i+1]
		}
	}
	return ""
}

// mountSmallDisk mounts a tmpfs on ps's data directory (needs root).
func mountSmallDisk(ps up.ProcSpec) (*smallDisk, error) {
	if os.Getuid() != 0 {
		return nil, errors.New("drill: disk-full needs root (it mounts a small tmpfs for the bookie's data)")
	}
	dir := dataDirOf(ps)
	if dir == "" {
		return nil, fmt.Errorf("drill: %s has no --data-dir", ps.Name)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+smallDiskSize, "tmpfs", dir).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("drill: mount a tmpfs on %s: %v: %s", dir, err, strings.TrimSpace(string(out)))
	}
	return &smallDisk{dir: dir, fill: filepath.Join(dir, "drill-fill")}, nil
}

// fillUp writes to the filesystem until it is full.
func (d *smallDisk) fillUp() error {
	f, err := os.OpenFile(d.fill, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	for {
		if _, err := f.Write(buf); err != nil {
			if errors.Is(err, syscall.ENOSPC) {
				return nil
			}
			return err
		}
	}
}

// free removes what fillUp wrote.
func (d *smallDisk) free() error {
	err := os.Remove(d.fill)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}

func (d *smallDisk) unmount() {
	exec.Command("umount", "-l", d.dir).Run()
}
