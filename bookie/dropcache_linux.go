package bookie

import "golang.org/x/sys/unix"

// dropPages asks the kernel to drop the page cache of [off, off+n) of the
// file open as fd. It is only called on synced ranges, so it never forces a
// write and never loses one.
func dropPages(fd uintptr, off, n int64) error {
	return unix.Fadvise(int(fd), off, n, unix.FADV_DONTNEED)
}

const canDropPages = true
