package binarypages

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// PageOut asks the kernel to reclaim the resident pages of the running
// binary's read-only mappings (its code and read-only data) and returns
// the bytes of the ranges it advised. Pages another process maps too stay
// where they are; a page needed again is read back in on its next use.
// Kernels older than 5.4 (no MADV_PAGEOUT) answer an error and nothing
// changes.
//
// The read-only data (type descriptors, stack maps, the function tables)
// is read back one page at a time from then on, without the kernel's
// read-around; code keeps it. The garbage collector reads a few bytes of
// that data per live type and per stack frame, pages apart, on every
// cycle, also in an idle server. Read around, each such read brought in
// 31 neighbouring pages and mapped 15 of them: an idle server's resident
// binary grew back from about 20 to 45-50 MiB in two minutes. Paged in one
// at a time it stays at 25 to 31 MiB. The price is paid once, by the first
// requests after start-up: they read the data they touch page by page
// (about 2,600 reads for the first plane creations, some 0.2 s in all).
// The executable's pages no process maps then leave the page cache too
// (dropCached), or faults would map them around the pages they need.
func PageOut() (int64, error) {
	ranges, err := readOnlyMappingsOfExecutable()
	if err != nil {
		return 0, err
	}
	exe, err := os.Open("/proc/self/exe")
	if err == nil {
		defer exe.Close()
		writeBack(exe)
		defer dropCached(exe)
	}
	var advised int64
	for _, r := range ranges {
		// Raw syscalls: the ranges are not Go memory, so there is no
		// slice to hand to unix.Madvise.
		if _, _, errno := unix.Syscall(unix.SYS_MADVISE, r.start, r.end-r.start, unix.MADV_PAGEOUT); errno != 0 {
			return advised, fmt.Errorf("madvise(MADV_PAGEOUT) %#x-%#x: %w", r.start, r.end, errno)
		}
		advised += int64(r.end - r.start)
		// Only once paged out: where the kernel cannot page out, the
		// mapping keeps its read-around.
		if !r.executable {
			if _, _, errno := unix.Syscall(unix.SYS_MADVISE, r.start, r.end-r.start, unix.MADV_RANDOM); errno != 0 {
				return advised, fmt.Errorf("madvise(MADV_RANDOM) %#x-%#x: %w", r.start, r.end, errno)
			}
		}
	}
	return advised, nil
}

// writeBack writes the executable's dirty pages to disk. The kernel pages
// out only clean pages: a binary written less than about 30 s before (a
// fresh build or install, writeback not yet due) kept every page resident
// through the page-out, and its idle server stood at 103 instead of 66 MiB
// (generic). Best effort: a file system that cannot sync leaves those
// pages where they are, as before.
func writeBack(exe *os.File) {
	_ = unix.Fdatasync(int(exe.Fd()))
}

// dropCached drops the executable's pages that no process maps from the
// page cache. The page-out reclaims only the pages this process maps;
// start-up's read-around had cached nearly all the rest of the file
// (about 125 of its 131 MiB), and a fault maps the cached neighbours of
// the page it needs (fault-around, up to 16 pages), read-around or not:
// the read-only data, meant to come back one page at a time, came back 16
// at a time whenever the cache held them. 130 s after ready, an idle
// server's read-only data was 7 to 26 MiB resident from one server to the
// next without the drop, 7 MiB in each with it. Pages other processes map
// stay; what is dropped is read again from disk by whoever needs it. Best
// effort, as the write-back.
func dropCached(exe *os.File) {
	_ = unix.Fadvise(int(exe.Fd()), 0, 0, unix.FADV_DONTNEED)
}

// addressRange is one mapping of the executable.
type addressRange struct {
	start, end uintptr
	// executable: the mapping holds code, not data.
	executable bool
}

// readOnlyMappingsOfExecutable lists the mappings of /proc/self/maps
// backed by the running executable's file and not writable. The kernel
// names the file the same way in both places, also when it sits on an
// overlay filesystem or was replaced on disk after the process started
// (" (deleted)").
func readOnlyMappingsOfExecutable() ([]addressRange, error) {
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return nil, fmt.Errorf("finding the running executable: %w", err)
	}
	maps, err := os.Open("/proc/self/maps")
	if err != nil {
		return nil, fmt.Errorf("reading the process's mappings: %w", err)
	}
	defer maps.Close()
	var ranges []addressRange
	lines := bufio.NewScanner(maps)
	for lines.Scan() {
		if r, ok := readOnlyMappingOf(lines.Text(), exe); ok {
			ranges = append(ranges, r)
		}
	}
	if err := lines.Err(); err != nil {
		return nil, fmt.Errorf("reading the process's mappings: %w", err)
	}
	return ranges, nil
}

// readOnlyMappingOf parses one line of /proc/self/maps
// ("start-end perms offset dev inode path") and reports whether it maps
// the file at path without write permission.
func readOnlyMappingOf(line, path string) (addressRange, bool) {
	fields := strings.SplitN(line, " ", 6)
	if len(fields) < 6 || strings.Contains(fields[1], "w") {
		return addressRange{}, false
	}
	if strings.TrimLeft(fields[5], " ") != path {
		return addressRange{}, false
	}
	start, end, ok := strings.Cut(fields[0], "-")
	if !ok {
		return addressRange{}, false
	}
	s, err1 := strconv.ParseUint(start, 16, 64)
	e, err2 := strconv.ParseUint(end, 16, 64)
	if err1 != nil || err2 != nil || e <= s {
		return addressRange{}, false
	}
	return addressRange{start: uintptr(s), end: uintptr(e), executable: strings.Contains(fields[1], "x")}, true
}
