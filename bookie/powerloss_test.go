package bookie

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// readAll returns a file's contents through fs.
func readAll(t *testing.T, fs vfs.FS, name string) []byte {
	t.Helper()
	f, err := fs.Open(name)
	if err != nil {
		t.Fatalf("open %s: %v", name, err)
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		t.Fatalf("read %s: %v", name, err)
	}
	return b
}

func listed(t *testing.T, fs vfs.FS, dir string) []string {
	t.Helper()
	names, err := fs.List(dir)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(names)
	return names
}

// A power loss keeps what was synced: a file's bytes after its Sync, its
// name after its directory's Sync. The "crash" is the PowerLossFS (and
// every open file) abandoned without another call, as kill -9 abandons a
// process: a new PowerLossFS on the same directory sees the disk.
func TestPowerLossFSKeepsOnlySyncedData(t *testing.T) {
	dir := t.TempDir()
	fs := NewPowerLossFS()
	p := func(n string) string { return filepath.Join(dir, n) }
	syncDir := func() {
		d, err := fs.OpenDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Sync(); err != nil {
			t.Fatal(err)
		}
		d.Close()
	}
	write := func(f vfs.File, s string) {
		if _, err := f.Write([]byte(s)); err != nil {
			t.Fatal(err)
		}
	}

	create := func(name, data string, sync bool) vfs.File {
		f, err := fs.Create(p(name), vfs.WriteCategoryUnspecified)
		if err != nil {
			t.Fatal(err)
		}
		write(f, data)
		if sync {
			if err := f.Sync(); err != nil {
				t.Fatal(err)
			}
		}
		return f
	}
	// Synced, names and bytes.
	durable := create("durable", "synced;", true)
	empty := create("empty", "", false)
	create("removed", "still here", true).Close()
	create("old", "renamed bytes", true).Close()
	syncDir()
	// Then, nothing synced but one file's bytes (not its name).
	write(durable, "unsynced tail")
	write(empty, "never synced")
	if err := fs.Remove(p("removed")); err != nil {
		t.Fatal(err)
	}
	if err := fs.Rename(p("old"), p("new")); err != nil {
		t.Fatal(err)
	}
	create("nameless", "data without a durable name", true)

	// Before the crash this process sees everything.
	if got := string(readAll(t, fs, p("durable"))); got != "synced;unsynced tail" {
		t.Fatalf("durable reads %q before the crash", got)
	}
	if got, want := listed(t, fs, dir), []string{"durable", "empty", "nameless", "new"}; !slices.Equal(got, want) {
		t.Fatalf("before the crash: %v, want %v", got, want)
	}
	// Nothing unsynced reached the disk, not even the page cache.
	if b, _ := os.ReadFile(p("durable")); string(b) != "synced;" {
		t.Fatalf("on disk, durable holds %q: unsynced bytes reached the kernel", b)
	}

	// Crash.
	after := NewPowerLossFS()
	if got, want := listed(t, after, dir), []string{"durable", "empty", "old", "removed"}; !slices.Equal(got, want) {
		t.Fatalf("after the crash: %v, want %v", got, want)
	}
	for name, want := range map[string]string{"durable": "synced;", "empty": "", "old": "renamed bytes", "removed": "still here"} {
		if got := string(readAll(t, after, p(name))); got != want {
			t.Errorf("after the crash %s holds %q, want %q", name, got, want)
		}
	}
	es, _ := os.ReadDir(dir)
	for _, e := range es {
		if strings.HasPrefix(e.Name(), powerLossPrefix) {
			t.Errorf("a crash's hidden file %s was not cleaned up", e.Name())
		}
	}
}

// The model is Pebble's own: the same random sequence of file and
// directory operations on a PowerLossFS and on Pebble's crashable MemFS,
// then a crash of each (the MemFS's CrashClone with nothing unsynced
// kept), leaves the same names with the same bytes.
func TestPowerLossFSMatchesPebbleCrashableMemFS(t *testing.T) {
	for seed := uint64(1); seed <= 40; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { comparePowerLoss(t, seed) })
	}
}

func comparePowerLoss(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 7))
	disk := t.TempDir()
	mem := vfs.NewCrashableMem()
	if err := mem.MkdirAll("/d", 0o755); err != nil {
		t.Fatal(err)
	}
	root, _ := mem.OpenDir("/")
	root.Sync()
	root.Close()
	pl := NewPowerLossFS()
	type pair struct{ a, b vfs.File }
	open := map[string]pair{}
	names := []string{"a", "b", "c", "d"}
	var ops []string
	both := func(op string, f func(fs vfs.FS, dir string) error) {
		ops = append(ops, op)
		errA, errB := f(pl, disk), f(mem, "/d")
		if (errA == nil) != (errB == nil) {
			t.Fatalf("ops %v: %s: powerloss says %v, memfs says %v", ops, op, errA, errB)
		}
	}
	for range 60 {
		name := names[rng.IntN(len(names))]
		other := names[rng.IntN(len(names))]
		switch k := rng.IntN(9); {
		case k == 0:
			if p, ok := open[name]; ok {
				p.a.Close()
				p.b.Close()
			}
			var a, b vfs.File
			both("create "+name, func(fs vfs.FS, dir string) (err error) {
				f, err := fs.Create(fs.PathJoin(dir, name), vfs.WriteCategoryUnspecified)
				if fs == vfs.FS(pl) {
					a = f
				} else {
					b = f
				}
				return err
			})
			open[name] = pair{a, b}
		case k <= 2:
			p, ok := open[name]
			if !ok {
				continue
			}
			data := make([]byte, 1+rng.IntN(9000))
			for i := range data {
				data[i] = byte(rng.Uint32())
			}
			ops = append(ops, fmt.Sprintf("write %s %d", name, len(data)))
			if _, err := p.a.Write(slices.Clone(data)); err != nil {
				t.Fatal(err)
			}
			if _, err := p.b.Write(slices.Clone(data)); err != nil {
				t.Fatal(err)
			}
		case k == 3:
			p, ok := open[name]
			if !ok {
				continue
			}
			ops = append(ops, "sync "+name)
			if err := p.a.Sync(); err != nil {
				t.Fatal(err)
			}
			p.b.Sync()
		case k == 4 || k == 5:
			both("syncdir", func(fs vfs.FS, dir string) error {
				d, err := fs.OpenDir(dir)
				if err != nil {
					return err
				}
				defer d.Close()
				return d.Sync()
			})
		case k == 6:
			both("rename "+name+" "+other, func(fs vfs.FS, dir string) error {
				if name == other {
					return nil
				}
				return fs.Rename(fs.PathJoin(dir, name), fs.PathJoin(dir, other))
			})
			if name != other {
				if p, ok := open[name]; ok {
					if q, ok := open[other]; ok {
						q.a.Close()
						q.b.Close()
					}
					open[other] = p
					delete(open, name)
				}
			}
		case k == 7:
			both("remove "+name, func(fs vfs.FS, dir string) error { return fs.Remove(fs.PathJoin(dir, name)) })
			if p, ok := open[name]; ok {
				p.a.Close()
				p.b.Close()
				delete(open, name)
			}
		case k == 8:
			both("link "+name+" "+other, func(fs vfs.FS, dir string) error {
				return fs.Link(fs.PathJoin(dir, name), fs.PathJoin(dir, other))
			})
		}
	}
	// Before the crash: the same view.
	if a, b := listed(t, pl, disk), listed(t, mem, "/d"); !slices.Equal(a, b) {
		t.Fatalf("ops %v: before the crash powerloss lists %v, memfs %v", ops, a, b)
	}
	crashed := mem.CrashClone(vfs.CrashCloneCfg{})
	for _, p := range open {
		p.a.Close()
		p.b.Close()
	}
	after := NewPowerLossFS()
	a, b := listed(t, after, disk), listed(t, crashed, "/d")
	if !slices.Equal(a, b) {
		t.Fatalf("ops %v: after the crash powerloss lists %v, memfs %v", ops, a, b)
	}
	for _, n := range a {
		x, y := readAll(t, after, filepath.Join(disk, n)), readAll(t, crashed, "/d/"+n)
		if !bytes.Equal(x, y) {
			t.Fatalf("ops %v: after the crash %s holds %d bytes on powerloss, %d on memfs", ops, n, len(x), len(y))
		}
	}
}

// powerLossChild is the environment variable that makes
// TestPowerLossHelperProcess the child of TestPebbleOnPowerLossFSAfterKill.
const powerLossChild = "MERIDIAN_POWERLOSS_CHILD"

// TestPowerLossHelperProcess is not a test: run as a child by
// TestPebbleOnPowerLossFSAfterKill (the os/exec tests' helper-process
// idiom), it writes to a Pebble store, prints "ready" and waits to be
// killed. Without the variable it returns at once.
func TestPowerLossHelperProcess(t *testing.T) {
	spec := os.Getenv(powerLossChild)
	if spec == "" {
		return
	}
	kind, dir, _ := strings.Cut(spec, ":")
	var fs vfs.FS = vfs.Default
	if kind == "powerloss" {
		fs = NewPowerLossFS()
	}
	db, err := pebble.Open(dir, &pebble.Options{FS: fs, Logger: pebbleLogger{discardLogger()}})
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(2)
	}
	if err := db.Set([]byte("synced"), []byte("1"), pebble.Sync); err != nil {
		fmt.Println("error:", err)
		os.Exit(2)
	}
	wal := func() int64 { // the WAL's size as the filesystem reports it
		names, _ := fs.List(dir)
		var size int64
		for _, n := range names {
			if strings.HasSuffix(n, ".log") {
				if fi, err := fs.Stat(filepath.Join(dir, n)); err == nil {
					size += fi.Size()
				}
			}
		}
		return size
	}
	before := wal()
	// Pebble's WAL writer hands an unsynced record to the filesystem only
	// once its 32 KiB block is full: a 64 KiB record behind it fills it.
	if err := db.Set([]byte("unsynced"), []byte("1"), pebble.NoSync); err != nil {
		fmt.Println("error:", err)
		os.Exit(2)
	}
	if err := db.Set([]byte("filler"), make([]byte, 64<<10), pebble.NoSync); err != nil {
		fmt.Println("error:", err)
		os.Exit(2)
	}
	// Wait until the block holding "unsynced" is with the filesystem.
	for wal() < before+32<<10 {
		time.Sleep(time.Millisecond)
	}
	fmt.Println("ready")
	time.Sleep(time.Minute)
	os.Exit(3)
}

// A Pebble store on a PowerLossFS, its process kill -9ed: the write
// committed with Sync is there, the one committed without is gone. On the
// plain disk (vfs.Default) the unsynced write survives the same kill -9 —
// the page cache keeps it — which is why kill -9 alone tests nothing about
// fsync.
func TestPebbleOnPowerLossFSAfterKill(t *testing.T) {
	for _, kind := range []string{"powerloss", "default"} {
		t.Run(kind, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "db")
			cmd := exec.Command(os.Args[0], "-test.run=^TestPowerLossHelperProcess$", "-test.count=1")
			cmd.Env = append(os.Environ(), powerLossChild+"="+kind+":"+dir)
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			cmd.Stderr = os.Stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			sc := bufio.NewScanner(out)
			ready := false
			for sc.Scan() {
				if sc.Text() == "ready" {
					ready = true
					break
				}
				t.Log("child:", sc.Text())
			}
			if !ready {
				cmd.Process.Kill()
				cmd.Wait()
				t.Fatal("the child did not get ready")
			}
			if err := cmd.Process.Kill(); err != nil { // SIGKILL
				t.Fatal(err)
			}
			cmd.Wait()

			var fs vfs.FS = vfs.Default
			if kind == "powerloss" {
				fs = NewPowerLossFS()
			}
			db, err := pebble.Open(dir, &pebble.Options{FS: fs, Logger: pebbleLogger{discardLogger()}})
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			has := func(k string) bool {
				_, c, err := db.Get([]byte(k))
				if err == nil {
					c.Close()
					return true
				}
				if !errors.Is(err, pebble.ErrNotFound) {
					t.Fatal(err)
				}
				return false
			}
			if !has("synced") {
				t.Fatal("the synced write is gone after kill -9")
			}
			switch got := has("unsynced"); {
			case kind == "powerloss" && got:
				t.Fatal("the unsynced write survived kill -9 on a PowerLossFS: it reached the kernel")
			case kind == "default" && !got:
				t.Fatal("the unsynced write is gone after kill -9 on the plain disk: the page cache should have kept it")
			}
		})
	}
}
