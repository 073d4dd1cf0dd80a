package binarypages

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

func TestReadOnlyMappingOf(t *testing.T) {
	const exe = "/usr/local/bin/kplane server"
	cases := []struct {
		line  string
		want  addressRange
		match bool
	}{
		{"00400000-040a2000 r-xp 00000000 fd:01 1234                               /usr/local/bin/kplane server", addressRange{start: 0x400000, end: 0x40a2000, executable: true}, true},
		{"040a2000-085db000 r--p 03ca2000 fd:01 1234                               /usr/local/bin/kplane server", addressRange{start: 0x40a2000, end: 0x85db000}, true},
		{"085db000-086ff000 rw-p 081db000 fd:01 1234                               /usr/local/bin/kplane server", addressRange{}, false},
		{"7f0000000000-7f0000001000 r--p 00000000 fd:01 99                         /usr/lib/libc.so.6", addressRange{}, false},
		{"7f0000000000-7f0000001000 rw-p 00000000 00:00 0 ", addressRange{}, false},
		{"garbage", addressRange{}, false},
	}
	for _, c := range cases {
		got, ok := readOnlyMappingOf(c.line, exe)
		if ok != c.match || got != c.want {
			t.Errorf("readOnlyMappingOf(%q) = %v, %v; want %v, %v", c.line, got, ok, c.want, c.match)
		}
	}
}

// The test binary's own read-only mappings are found, and paging them
// out lowers its resident file pages while it goes on running.
func TestPageOutReleasesTheBinarysPages(t *testing.T) {
	ranges, err := readOnlyMappingsOfExecutable()
	if err != nil {
		t.Fatal(err)
	}
	if len(ranges) == 0 {
		t.Fatal("no read-only mapping of the running executable found in /proc/self/maps")
	}
	before := residentFileKiB(t)
	advised, err := PageOut()
	if errors.Is(err, unix.EINVAL) {
		t.Skipf("this kernel has no MADV_PAGEOUT (Linux 5.4 and later have it): %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	after := residentFileKiB(t)
	var total int64
	for _, r := range ranges {
		total += int64(r.end - r.start)
	}
	if advised != total {
		t.Errorf("PageOut advised %d bytes, the executable's read-only mappings span %d", advised, total)
	}
	if after >= before {
		t.Errorf("resident file pages went from %d KiB to %d KiB", before, after)
	}
	t.Logf("resident file pages: %d KiB before, %d KiB after", before, after)
}

func residentFileKiB(t *testing.T) int {
	t.Helper()
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if value, ok := strings.CutPrefix(line, "RssFile:"); ok {
			kib, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(value), " kB"))
			if err != nil {
				t.Fatalf("RssFile %q: %v", value, err)
			}
			return kib
		}
	}
	t.Fatalf("no RssFile in /proc/self/status:\n%s", status)
	return 0
}

// After PageOut the executable's read-only data is read back one page at
// a time (VM_RAND_READ, "rr" in smaps) and its code is not.
func TestPageOutReadsDataBackByPage(t *testing.T) {
	if _, err := PageOut(); errors.Is(err, unix.EINVAL) {
		t.Skipf("this kernel has no MADV_PAGEOUT (Linux 5.4 and later have it): %v", err)
	} else if err != nil {
		t.Fatal(err)
	}
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	smaps, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	var seenCode, seenData bool
	var mapping addressRange
	var ours bool
	for _, line := range strings.Split(string(smaps), "\n") {
		if r, ok := readOnlyMappingOf(line, exe); ok {
			mapping, ours = r, true
			continue
		}
		flags, ok := strings.CutPrefix(line, "VmFlags:")
		if !ok || !ours {
			continue
		}
		ours = false
		random := strings.Contains(" "+flags+" ", " rr ")
		if mapping.executable {
			seenCode = true
			if random {
				t.Errorf("the code mapping %#x-%#x lost the kernel's read-around", mapping.start, mapping.end)
			}
		} else {
			seenData = true
			if !random {
				t.Errorf("the data mapping %#x-%#x is still read around (VmFlags:%s)", mapping.start, mapping.end, flags)
			}
		}
	}
	if !seenCode || !seenData {
		t.Fatalf("smaps named the executable's code (%v) and read-only data (%v) mappings", seenCode, seenData)
	}
}

// dropCached, which PageOut runs on the executable, leaves none of a
// file's unmapped pages in the page cache.
func TestDropCachedEmptiesTheFilesPageCache(t *testing.T) {
	path := filepath.Join(t.TempDir(), "binary")
	if err := os.WriteFile(path, make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var fs unix.Statfs_t
	if err := unix.Fstatfs(int(f.Fd()), &fs); err != nil {
		t.Fatal(err)
	}
	if fs.Type == unix.TMPFS_MAGIC {
		t.Skip("the temporary directory is on tmpfs, whose pages are the files themselves and never leave memory")
	}
	// Written back first, as PageOut does: dirty pages stay cached.
	writeBack(f)
	if _, err := io.Copy(io.Discard, f); err != nil {
		t.Fatal(err)
	}
	before := cachedPages(t, f, 0, 1<<20)
	if before == 0 {
		t.Fatal("reading the file left none of it in the page cache")
	}
	dropCached(f)
	if after := cachedPages(t, f, 0, 1<<20); after != 0 {
		t.Errorf("%d of the file's %d cached pages are still cached", after, before)
	}
}

// cachedPages counts the pages of f's bytes from-to (page aligned) in the
// page cache: mincore over a mapping of them that is never touched.
func cachedPages(t *testing.T, f *os.File, from, to int64) int {
	t.Helper()
	data, err := unix.Mmap(int(f.Fd()), from, int(to-from), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(data)
	vec := make([]byte, len(data)/os.Getpagesize())
	if _, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&data[0])), uintptr(len(data)), uintptr(unsafe.Pointer(&vec[0]))); errno != 0 {
		t.Fatalf("mincore: %v", errno)
	}
	n := 0
	for _, v := range vec {
		n += int(v & 1)
	}
	return n
}
