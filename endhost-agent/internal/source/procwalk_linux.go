package source

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// procWalker finds which process holds given socket inodes by reading /proc/PID/fd links.
//
// Why it is cheaper than gopsutil's walk: it runs only for sockets not seen before, stops as
// soon as all are found, visits the newest processes first (new connections come mostly from
// new processes), and remembers each process's fd -> socket links so that a long-lived
// process with thousands of sockets costs one readdir, not thousands of readlinks, per walk.
type procWalker struct {
	root string
	// sockets[pid][fd] is the socket inode fd held when last read. An entry is trusted only
	// while that inode is alive: once the socket closes, its fd number may be reused.
	sockets map[int]map[string]uint64
	alive   map[uint64]bool
}

func newProcWalker(root string) *procWalker {
	return &procWalker{root: root, sockets: map[int]map[string]uint64{}, alive: map[uint64]bool{}}
}

// setAlive records the socket inodes of the latest dump: cached fd links to other inodes
// are stale.
func (w *procWalker) setAlive(alive map[uint64]bool) { w.alive = alive }

func (w *procWalker) find(inodes []uint64) map[uint64]string {
	want := make(map[uint64]bool, len(inodes))
	for _, ino := range inodes {
		want[ino] = true
	}
	found := map[uint64]string{}
	pids := w.pids()
	present := make(map[int]bool, len(pids))
	for _, pid := range pids {
		present[pid] = true
	}
	for pid := range w.sockets {
		if !present[pid] {
			delete(w.sockets, pid)
		}
	}
	for _, pid := range pids {
		hits := w.readFDs(pid, want)
		if len(hits) == 0 {
			continue
		}
		program := w.program(pid)
		for _, ino := range hits {
			delete(want, ino)
			if program != "" {
				found[ino] = program
			}
		}
		if len(want) == 0 {
			break
		}
	}
	return found
}

// pids lists processes newest (highest id) first.
func (w *procWalker) pids() []int {
	entries, err := os.ReadDir(w.root)
	if err != nil {
		return nil
	}
	pids := make([]int, 0, len(entries))
	for _, e := range entries {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			pids = append(pids, pid)
		}
	}
	slices.SortFunc(pids, func(a, b int) int { return b - a })
	return pids
}

// readFDs updates pid's fd -> socket map and returns the wanted inodes it holds.
func (w *procWalker) readFDs(pid int, want map[uint64]bool) []uint64 {
	dir := filepath.Join(w.root, strconv.Itoa(pid), "fd")
	f, err := os.Open(dir)
	if err != nil {
		return nil // exited, or a kernel thread
	}
	fds, err := f.Readdirnames(-1)
	f.Close()
	if err != nil {
		return nil
	}
	old := w.sockets[pid]
	now := make(map[string]uint64, len(old))
	var hits []uint64
	for _, fd := range fds {
		ino, ok := old[fd]
		if !ok || !w.alive[ino] {
			link, err := os.Readlink(filepath.Join(dir, fd))
			if err != nil {
				continue
			}
			if ino, ok = socketInode(link); !ok {
				continue // not a socket; files are read again next walk, their fds get reused
			}
		}
		now[fd] = ino
		if want[ino] {
			hits = append(hits, ino)
		}
	}
	if len(now) > 0 {
		w.sockets[pid] = now
	} else {
		delete(w.sockets, pid)
	}
	return hits
}

// socketInode parses "socket:[12345]".
func socketInode(link string) (uint64, bool) {
	rest, ok := strings.CutPrefix(link, "socket:[")
	if !ok || !strings.HasSuffix(rest, "]") {
		return 0, false
	}
	ino, err := strconv.ParseUint(rest[:len(rest)-1], 10, 64)
	return ino, err == nil
}

// program is the base name of pid's executable, or its command name when the executable
// cannot be read (a kernel thread, or another user's process without privileges).
func (w *procWalker) program(pid int) string {
	dir := filepath.Join(w.root, strconv.Itoa(pid))
	if exe, err := os.Readlink(filepath.Join(dir, "exe")); err == nil {
		return programName(strings.TrimSuffix(exe, " (deleted)"))
	}
	comm, err := os.ReadFile(filepath.Join(dir, "comm"))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(comm))
}
