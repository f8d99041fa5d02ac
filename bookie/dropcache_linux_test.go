package bookie

import (
	"os"
	"path/filepath"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// residentPages returns how many of the first n bytes' pages of the file at
// path are in the page cache (mincore on a read-only mapping).
func residentPages(t *testing.T, path string, n int64) (resident, pages int) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m, err := unix.Mmap(int(f.Fd()), 0, int(n), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(m)
	vec := make([]byte, (n+pageSize-1)/pageSize)
	if _, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&vec[0]))); e != 0 {
		t.Fatal(e)
	}
	for _, v := range vec {
		if v&1 != 0 {
			resident++
		}
	}
	return resident, len(vec)
}

// Requirement: on the real disk, the entry log drops its synced pages from
// the page cache as it goes (all but the last MiB or so), and every entry
// still reads back, from the disk; with DropSyncedPages < 0 the pages stay.
func TestEntryLogDropsSyncedPages(t *testing.T) {
	var st unix.Statfs_t
	dir := t.TempDir()
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	if st.Type == unix.TMPFS_MAGIC {
		t.Skip("the temporary directory is on tmpfs, whose pages cannot be dropped")
	}
	const n = 64 // 64 entries of 64 KiB: 4 MiB of log, one commit each
	payload := func(i int64) []byte {
		p := make([]byte, 64<<10)
		for j := range p {
			p[j] = byte(i + int64(j)*7)
		}
		return p
	}
	run := func(name string, drop int) (resident, pages int) {
		d := filepath.Join(dir, name)
		s, err := OpenStore(d, StoreOptions{DropSyncedPages: drop, Logger: testLogger()})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		for i := range int64(n) {
			if err := s.Add(entry(1, i, i-1, payload(i))); err != nil {
				t.Fatal(err)
			}
		}
		end := s.elog.pos()
		resident, pages = residentPages(t, filepath.Join(d, entryLogDir, entryLogName(end.file)), end.off)
		for i := range int64(n) {
			_, p, _, err := s.Read(1, i)
			if err != nil {
				t.Fatalf("%s: entry %d: %v", name, i, err)
			}
			if string(p) != string(payload(i)) {
				t.Fatalf("%s: entry %d came back different", name, i)
			}
		}
		return resident, pages
	}
	res, pages := run("drop", 0) // the default on the real disk
	if pages < 1000 {
		t.Fatalf("only %d pages of log", pages)
	}
	// Dropped: everything but the last dropChunk (and the page at the end).
	if max := int(dropChunk/pageSize) + 1; res > max {
		t.Fatalf("%d of %d pages of the synced log still cached, want <= %d", res, pages, max)
	}
	keep, pages := run("keep", -1)
	if keep < pages*9/10 {
		t.Fatalf("DropSyncedPages -1: only %d of %d pages cached; the comparison above means nothing", keep, pages)
	}
	t.Logf("cached pages of the synced log: %d of %d dropping, %d of %d keeping", res, pages, keep, pages)
}
