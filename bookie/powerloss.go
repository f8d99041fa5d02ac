package bookie

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// PowerLossFS is a vfs.FS over the real disk that keeps in this process's
// memory everything a power loss would lose, so that a kill -9 of the
// process loses exactly that. For drills and tests only (`meridian bookie
// --simulate-power-loss`): kill -9 alone keeps the kernel's page cache, so
// it proves nothing about fsync.
//
// What reaches the disk, and when:
//
//   - A file's bytes written since its last Sync (or SyncData) live only in
//     memory; Sync writes them to the file and fsyncs it. SyncTo syncs
//     nothing and says so (fullSync false), as Pebble's crashable MemFS
//     does: a prefix sync makes no durability promise.
//   - A directory's entries changed since its last Sync (OpenDir(d).Sync())
//     — files created, renamed, linked or removed in it — live only in
//     memory; the directory's Sync makes the disk's entries those the
//     directory has now, and fsyncs it. Until then the disk keeps the old
//     entries (a removed file comes back after a crash; a created one is
//     gone, and so is whatever was synced into it). A new file's bytes
//     wait in a hidden file of its directory (".powerloss-N") until its
//     name is synced; such files left by a crash are deleted when the
//     directory is first used again.
//   - Directories themselves (MkdirAll) and RemoveAll take effect on disk at
//     once (the data directory is created once, at format time). Renames
//     and links stay inside one directory (errCrossDir otherwise).
//
// The model is Pebble's vfs.NewCrashableMem with CrashCloneCfg zero (after
// a crash: exactly what was synced), on disk; powerloss_test.go checks the
// two agree. Reads see every write, synced or not. One PowerLossFS per
// directory tree at a time: a second one (another process) would take the
// first one's hidden files for a crash's leftovers.
type PowerLossFS struct {
	mu   sync.Mutex
	dirs map[string]*plDir // by cleaned path
	seq  atomic.Uint64
}

var _ vfs.FS = (*PowerLossFS)(nil)

const powerLossPrefix = ".powerloss-"

// errCrossDir: a rename or link between directories (Pebble makes none in
// a bookie's data directory; the model would need both directories'
// syncs).
var errCrossDir = errors.New("bookie: powerloss: rename or link across directories is not supported")

// NewPowerLossFS returns a PowerLossFS over the real filesystem.
func NewPowerLossFS() *PowerLossFS { return &PowerLossFS{dirs: map[string]*plDir{}} }

// SimulatePowerLoss returns c with its store on a PowerLossFS: a kill -9 of
// the bookie then loses what a power loss would (drills and tests only).
func (c Config) SimulatePowerLoss() Config {
	c.fs = NewPowerLossFS()
	return c
}

// plDir is a directory as this process sees it: its entries now (names),
// against the entries on disk (what a crash leaves).
type plDir struct {
	path  string
	names map[string]*plNode
}

// plNode is a file (an inode): its bytes on disk, and the writes since its
// last Sync.
type plNode struct {
	mu sync.Mutex
	// phys is a path of the inode on disk (a synced name, or its hidden
	// file); "" once no path names it (removed and synced away).
	phys string
	// size is the file's size as this process sees it.
	size int64
	// pending writes since the last Sync, in order.
	pending []plWrite
}

type plWrite struct {
	off  int64
	data []byte
}

// dir returns the directory's state, reading it from disk on first use
// (and deleting a previous incarnation's hidden files).
func (fs *PowerLossFS) dir(path string) (*plDir, error) {
	path = filepath.Clean(path)
	if d, ok := fs.dirs[path]; ok {
		return d, nil
	}
	es, err := os.ReadDir(path)
	if err != nil {
		return nil, err
	}
	d := &plDir{path: path, names: map[string]*plNode{}}
	for _, e := range es {
		p := filepath.Join(path, e.Name())
		if strings.HasPrefix(e.Name(), powerLossPrefix) {
			if err := os.Remove(p); err != nil && !os.IsNotExist(err) {
				return nil, err
			}
			continue
		}
		if e.IsDir() {
			continue
		}
		fi, err := e.Info()
		if err != nil {
			return nil, err
		}
		d.names[e.Name()] = &plNode{phys: p, size: fi.Size()}
	}
	fs.dirs[path] = d
	return d, nil
}

// lookup returns the node of a file name (nil if absent) and its directory.
func (fs *PowerLossFS) lookup(name string) (*plDir, string, *plNode, error) {
	d, err := fs.dir(filepath.Dir(name))
	if err != nil {
		return nil, "", nil, err
	}
	base := filepath.Base(name)
	return d, base, d.names[base], nil
}

func notExist(op, name string) error {
	return &os.PathError{Op: op, Path: name, Err: os.ErrNotExist}
}

// newNode makes a new empty file in d, on disk as a hidden file.
func (fs *PowerLossFS) newNode(d *plDir) (*plNode, error) {
	p := filepath.Join(d.path, powerLossPrefix+strconv.FormatUint(fs.seq.Add(1), 10))
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE|os.O_EXCL|syscall.O_CLOEXEC, 0o644)
	if err != nil {
		return nil, err
	}
	f.Close()
	return &plNode{phys: p}, nil
}

// Create implements vfs.FS: a new file replaces any file of that name.
func (fs *PowerLossFS) Create(name string, _ vfs.DiskWriteCategory) (vfs.File, error) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	d, base, _, err := fs.lookup(name)
	if err != nil {
		return nil, err
	}
	n, err := fs.newNode(d)
	if err != nil {
		return nil, err
	}
	d.names[base] = n
	return openNode(n, name, true, true)
}

// Link implements vfs.FS.
func (fs *PowerLossFS) Link(oldname, newname string) error {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	_, _, n, err := fs.lookup(oldname)
	if err != nil {
		return err
	}
	if n == nil {
		return &os.LinkError{Op: "link", Old: oldname, New: newname, Err: os.ErrNotExist}
	}
	d, base, m, err := fs.lookup(newname)
	if err != nil {
		return err
	}
	if d.path != filepath.Dir(filepath.Clean(oldname)) {
		return &os.LinkError{Op: "link", Old: oldname, New: newname, Err: errCrossDir}
	}
	if m != nil {
		return &os.LinkError{Op: "link", Old: oldname, New: newname, Err: os.ErrExist}
	}
	d.names[base] = n
	return nil
}

// Open implements vfs.FS.
func (fs *PowerLossFS) Open(name string, opts ...vfs.OpenOption) (vfs.File, error) {
	fs.mu.Lock()
	_, _, n, err := fs.lookup(name)
	fs.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if n == nil {
		return nil, notExist("open", name)
	}
	f, err := openNode(n, name, true, false)
	if err != nil {
		return nil, err
	}
	for _, o := range opts {
		o.Apply(f)
	}
	return f, nil
}

// OpenReadWrite implements vfs.FS (creating the file if absent).
func (fs *PowerLossFS) OpenReadWrite(name string, cat vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	fs.mu.Lock()
	_, _, n, err := fs.lookup(name)
	fs.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if n == nil {
		return fs.Create(name, cat)
	}
	f, err := openNode(n, name, true, true)
	if err != nil {
		return nil, err
	}
	for _, o := range opts {
		o.Apply(f)
	}
	return f, nil
}

// OpenDir implements vfs.FS: the handle's Sync makes the directory's
// entries durable.
func (fs *PowerLossFS) OpenDir(name string) (vfs.File, error) {
	f, err := os.OpenFile(name, syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	return &plDirFile{File: f, fs: fs, path: filepath.Clean(name)}, nil
}

// Remove implements vfs.FS. Removing a directory (empty) takes effect on
// disk at once.
func (fs *PowerLossFS) Remove(name string) error {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	d, base, n, err := fs.lookup(name)
	if err != nil {
		return err
	}
	if n == nil {
		if fi, err := os.Stat(name); err == nil && fi.IsDir() {
			delete(fs.dirs, filepath.Clean(name))
			return os.Remove(name)
		}
		return notExist("remove", name)
	}
	delete(d.names, base)
	return nil
}

// RemoveAll implements vfs.FS; it takes effect on disk at once.
func (fs *PowerLossFS) RemoveAll(name string) error {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	clean := filepath.Clean(name)
	for p := range fs.dirs {
		if p == clean || strings.HasPrefix(p, clean+string(filepath.Separator)) {
			delete(fs.dirs, p)
		}
	}
	if d, ok := fs.dirs[filepath.Dir(clean)]; ok {
		delete(d.names, filepath.Base(clean))
	}
	return os.RemoveAll(name)
}

// Rename implements vfs.FS.
func (fs *PowerLossFS) Rename(oldname, newname string) error {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	od, obase, n, err := fs.lookup(oldname)
	if err != nil {
		return err
	}
	if n == nil {
		return &os.LinkError{Op: "rename", Old: oldname, New: newname, Err: os.ErrNotExist}
	}
	nd, nbase, _, err := fs.lookup(newname)
	if err != nil {
		return err
	}
	if nd != od {
		return &os.LinkError{Op: "rename", Old: oldname, New: newname, Err: errCrossDir}
	}
	delete(od.names, obase)
	nd.names[nbase] = n
	return nil
}

// ReuseForWrite implements vfs.FS: rename, then write over the old bytes.
func (fs *PowerLossFS) ReuseForWrite(oldname, newname string, _ vfs.DiskWriteCategory) (vfs.File, error) {
	if err := fs.Rename(oldname, newname); err != nil {
		return nil, err
	}
	fs.mu.Lock()
	_, _, n, err := fs.lookup(newname)
	fs.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return openNode(n, newname, false, true)
}

// MkdirAll implements vfs.FS; new directories are durable at once (their
// parents are fsynced).
func (fs *PowerLossFS) MkdirAll(dir string, perm os.FileMode) error {
	var missing []string
	for p := filepath.Clean(dir); ; p = filepath.Dir(p) {
		if _, err := os.Stat(p); err == nil {
			break
		}
		missing = append(missing, p)
		if filepath.Dir(p) == p {
			break
		}
	}
	if err := os.MkdirAll(dir, perm); err != nil {
		return err
	}
	for _, p := range missing {
		if err := syncPath(filepath.Dir(p)); err != nil {
			return err
		}
	}
	return nil
}

// Lock implements vfs.FS (the lock file is the disk's, as with vfs.Default).
func (fs *PowerLossFS) Lock(name string) (io.Closer, error) {
	fs.mu.Lock()
	d, base, _, err := fs.lookup(name)
	fs.mu.Unlock()
	if err != nil {
		return nil, err
	}
	c, err := vfs.Default.Lock(name)
	if err != nil {
		return nil, err
	}
	fs.mu.Lock()
	if _, ok := d.names[base]; !ok {
		d.names[base] = &plNode{phys: filepath.Join(d.path, base)}
	}
	fs.mu.Unlock()
	return c, nil
}

// List implements vfs.FS: the entries as this process sees them.
func (fs *PowerLossFS) List(dir string) ([]string, error) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	d, err := fs.dir(dir)
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(d.names))
	for n := range d.names {
		out = append(out, n)
	}
	es, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	for _, e := range es {
		if e.IsDir() {
			out = append(out, e.Name())
		}
	}
	return out, nil
}

// Stat implements vfs.FS.
func (fs *PowerLossFS) Stat(name string) (vfs.FileInfo, error) {
	fs.mu.Lock()
	_, base, n, err := fs.lookup(name)
	fs.mu.Unlock()
	if err == nil && n != nil {
		return n.stat(base)
	}
	fi, serr := vfs.Default.Stat(name)
	if serr == nil && fi.IsDir() {
		return fi, nil
	}
	if err != nil {
		return nil, err
	}
	return nil, notExist("stat", name)
}

func (*PowerLossFS) PathBase(p string) string       { return filepath.Base(p) }
func (*PowerLossFS) PathJoin(elem ...string) string { return filepath.Join(elem...) }
func (*PowerLossFS) PathDir(p string) string        { return filepath.Dir(p) }
func (*PowerLossFS) Unwrap() vfs.FS                 { return nil }
func (*PowerLossFS) String() string                 { return "powerloss" }
func (*PowerLossFS) GetDiskUsage(path string) (vfs.DiskUsage, error) {
	return vfs.Default.GetDiskUsage(path)
}

// syncDir makes the disk's entries of path the ones this process sees,
// then fsyncs the directory:
//
//  1. an inode that gets a new name here, and whose path on disk is a name
//     of this directory about to be replaced or removed, first gets a
//     hidden link of its own;
//  2. each live name that is not yet its inode on disk is put in place by
//     a rename (of the inode's hidden path, for its last name) or a link
//     and a rename, so a name is always replaced atomically;
//  3. names on disk that are no longer live are removed;
//  4. the directory is fsynced.
//
// A kill -9 in the middle leaves some of these done: a state a power loss
// could leave too (any of a directory's unsynced changes may have reached
// the disk), except that a rename may show both names for a moment.
func (fs *PowerLossFS) syncDir(path string) error {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	d, err := fs.dir(path)
	if err != nil {
		return err
	}
	hidden := func(p string) bool { return strings.HasPrefix(filepath.Base(p), powerLossPrefix) }
	tmpName := func() string {
		return filepath.Join(path, powerLossPrefix+"l"+strconv.FormatUint(fs.seq.Add(1), 10))
	}
	// The live names of each inode that are not on disk yet.
	todo := map[*plNode][]string{}
	for name, n := range d.names {
		n.mu.Lock()
		phys := n.phys
		n.mu.Unlock()
		if phys != filepath.Join(path, name) {
			todo[n] = append(todo[n], name)
		}
	}
	// 1.
	for n := range todo {
		n.mu.Lock()
		src := n.phys
		n.mu.Unlock()
		if filepath.Dir(src) != path || hidden(src) || d.names[filepath.Base(src)] == n {
			continue
		}
		tmp := tmpName()
		if err := os.Link(src, tmp); err != nil {
			return err
		}
		n.mu.Lock()
		n.phys = tmp
		n.mu.Unlock()
	}
	// 2.
	for n, names := range todo {
		n.mu.Lock()
		src := n.phys
		n.mu.Unlock()
		for i, name := range names {
			dst := filepath.Join(path, name)
			if i == len(names)-1 && hidden(src) && filepath.Dir(src) == path {
				if err := os.Rename(src, dst); err != nil {
					return err
				}
			} else {
				tmp := tmpName()
				if err := os.Link(src, tmp); err != nil {
					return err
				}
				if err := os.Rename(tmp, dst); err != nil {
					return err
				}
			}
		}
		n.mu.Lock()
		n.phys = filepath.Join(path, names[len(names)-1])
		n.mu.Unlock()
	}
	// 3.
	es, err := os.ReadDir(path)
	if err != nil {
		return err
	}
	for _, e := range es {
		if e.IsDir() || hidden(e.Name()) {
			continue
		}
		if _, live := d.names[e.Name()]; !live {
			if err := os.Remove(filepath.Join(path, e.Name())); err != nil && !os.IsNotExist(err) {
				return err
			}
		}
	}
	// 4.
	return syncPath(path)
}

func syncPath(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

// plDirFile is a directory opened for syncing.
type plDirFile struct {
	*os.File
	fs   *PowerLossFS
	path string
}

func (f *plDirFile) Sync() error                    { return f.fs.syncDir(f.path) }
func (f *plDirFile) SyncData() error                { return f.Sync() }
func (f *plDirFile) SyncTo(int64) (bool, error)     { return false, nil }
func (f *plDirFile) Prefetch(int64, int64) error    { return nil }
func (f *plDirFile) Preallocate(int64, int64) error { return nil }
func (f *plDirFile) Fd() uintptr                    { return vfs.InvalidFd }
func (f *plDirFile) Write([]byte) (int, error) {
	return 0, errors.New("bookie: powerloss: write to a directory")
}
func (f *plDirFile) WriteAt([]byte, int64) (int, error) {
	return 0, errors.New("bookie: powerloss: write to a directory")
}
func (f *plDirFile) Stat() (vfs.FileInfo, error) { return vfs.Default.Stat(f.path) }
func (f *plDirFile) ReadAt(p []byte, off int64) (int, error) {
	return 0, errors.New("bookie: powerloss: read of a directory")
}
func (f *plDirFile) Read(p []byte) (int, error) {
	return 0, errors.New("bookie: powerloss: read of a directory")
}

// plFile is an open file. Write and Sync are called by one goroutine at a
// time (vfs.File's contract); reads may run concurrently.
type plFile struct {
	n           *plNode
	name        string
	f           vfs.File // the inode on disk (vfs.Default's file)
	read, write bool
	pos         int64
}

func openNode(n *plNode, name string, read, write bool) (*plFile, error) {
	n.mu.Lock()
	phys := n.phys
	n.mu.Unlock()
	var f vfs.File
	var err error
	if write {
		// The inode exists (a hidden file or a name read from disk): this
		// opens it, it creates nothing.
		f, err = vfs.Default.OpenReadWrite(phys, vfs.WriteCategoryUnspecified)
	} else {
		f, err = vfs.Default.Open(phys)
	}
	if err != nil {
		return nil, fmt.Errorf("bookie: powerloss: open %s (%s): %w", name, phys, err)
	}
	return &plFile{n: n, name: name, f: f, read: read, write: write}, nil
}

func (f *plFile) Close() error { return f.f.Close() }

func (f *plFile) Read(p []byte) (int, error) {
	n, err := f.ReadAt(p, f.pos)
	f.pos += int64(n)
	return n, err
}

// ReadAt reads the disk's bytes with the pending writes laid over them.
func (f *plFile) ReadAt(p []byte, off int64) (int, error) {
	if !f.read {
		return 0, errors.New("bookie: powerloss: file not open for reading")
	}
	n := f.n
	n.mu.Lock()
	defer n.mu.Unlock()
	if off >= n.size {
		return 0, io.EOF
	}
	want := min(int64(len(p)), n.size-off)
	buf := p[:want]
	got, err := f.f.ReadAt(buf, off)
	if err != nil && err != io.EOF {
		return 0, err
	}
	clear(buf[got:]) // past the synced end: only pending writes (or a hole)
	for _, w := range n.pending {
		lo, hi := max(off, w.off), min(off+want, w.off+int64(len(w.data)))
		if lo < hi {
			copy(buf[lo-off:hi-off], w.data[lo-w.off:hi-w.off])
		}
	}
	if want < int64(len(p)) {
		return int(want), io.EOF
	}
	return int(want), nil
}

func (f *plFile) Write(p []byte) (int, error) {
	n, err := f.WriteAt(p, f.pos)
	f.pos += int64(n)
	return n, err
}

// WriteAt keeps the bytes in memory until Sync.
func (f *plFile) WriteAt(p []byte, off int64) (int, error) {
	if !f.write {
		return 0, errors.New("bookie: powerloss: file not open for writing")
	}
	n := f.n
	n.mu.Lock()
	defer n.mu.Unlock()
	n.pending = append(n.pending, plWrite{off: off, data: append([]byte(nil), p...)})
	n.size = max(n.size, off+int64(len(p)))
	return len(p), nil
}

// Sync writes the pending bytes to the inode and fsyncs it.
func (f *plFile) Sync() error {
	n := f.n
	n.mu.Lock()
	defer n.mu.Unlock()
	if !f.write && len(n.pending) > 0 {
		return errors.New("bookie: powerloss: sync of a file not open for writing")
	}
	for _, w := range n.pending {
		if _, err := f.f.WriteAt(w.data, w.off); err != nil {
			return err
		}
	}
	if err := f.f.Sync(); err != nil {
		return err
	}
	n.pending = nil
	return nil
}

func (f *plFile) SyncData() error { return f.Sync() }

// SyncTo promises nothing (fullSync false): Pebble calls Sync when it
// needs durability.
func (f *plFile) SyncTo(int64) (bool, error) { return false, nil }

func (f *plFile) Preallocate(int64, int64) error { return nil }
func (f *plFile) Prefetch(int64, int64) error    { return nil }
func (f *plFile) Fd() uintptr                    { return vfs.InvalidFd }

// Stat describes the open inode (even if its names are gone) with the
// size this process sees.
func (f *plFile) Stat() (vfs.FileInfo, error) {
	fi, err := f.f.Stat()
	if err != nil {
		return nil, err
	}
	f.n.mu.Lock()
	size := f.n.size
	f.n.mu.Unlock()
	return plFileInfo{FileInfo: fi, name: filepath.Base(f.name), size: size}, nil
}

func (n *plNode) stat(name string) (vfs.FileInfo, error) {
	n.mu.Lock()
	phys, size := n.phys, n.size
	n.mu.Unlock()
	fi, err := vfs.Default.Stat(phys)
	if err != nil {
		return nil, err
	}
	return plFileInfo{FileInfo: fi, name: name, size: size}, nil
}

// plFileInfo is the disk's FileInfo with the name and size this process
// sees.
type plFileInfo struct {
	vfs.FileInfo
	name string
	size int64
}

func (i plFileInfo) Name() string { return i.name }
func (i plFileInfo) Size() int64  { return i.size }
