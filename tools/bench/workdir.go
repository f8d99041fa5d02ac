package bench

import (
	"os"
	"path/filepath"
)

// workDir is a bench's data directory as an absolute path: dir when the
// caller named one (kept afterwards), else a new .bench-NAME-* directory
// under the current one (on the disk the bench measures),
// which cleanup removes.
func workDir(dir, name string) (abs string, cleanup func(), err error) {
	cleanup = func() {}
	if dir == "" {
		if dir, err = os.MkdirTemp(".", ".bench-"+name+"-"); err != nil {
			return "", cleanup, err
		}
		tmp := dir
		cleanup = func() { os.RemoveAll(tmp) }
	}
	if abs, err = filepath.Abs(dir); err != nil {
		cleanup()
		return "", func() {}, err
	}
	return abs, cleanup, nil
}
