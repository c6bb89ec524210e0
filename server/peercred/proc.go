package peercred

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Holders returns the pids under procDir that hold a file descriptor on
// the socket inode (usually one; more after a fork). Processes that exit
// or cannot be read while it looks are skipped: it reports who it saw.
func Holders(procDir string, inode uint64) ([]int, error) {
	ents, err := os.ReadDir(procDir)
	if err != nil {
		return nil, fmt.Errorf("peercred: %w", err)
	}
	want := "socket:[" + strconv.FormatUint(inode, 10) + "]"
	var pids []int
	for _, d := range ents {
		pid, err := strconv.Atoi(d.Name())
		if err != nil || pid <= 0 {
			continue
		}
		fdDir := filepath.Join(procDir, d.Name(), "fd")
		fds, err := os.ReadDir(fdDir)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			if l, err := os.Readlink(filepath.Join(fdDir, fd.Name())); err == nil && l == want {
				pids = append(pids, pid)
				break
			}
		}
	}
	return pids, nil
}

// Status is who a process is, from /proc/<pid>/status.
type Status struct {
	GID    uint32   // effective gid (the second field of Gid:)
	Groups []uint32 // supplementary groups
}

// ReadStatus reads the Gid: and Groups: lines of pid's status under
// procDir.
func ReadStatus(procDir string, pid int) (Status, error) {
	st, err := readStatus(procDir, pid)
	if err != nil {
		return Status{}, fmt.Errorf("peercred: pid %d: %w", pid, err)
	}
	return st, nil
}

func readStatus(procDir string, pid int) (Status, error) {
	b, err := os.ReadFile(filepath.Join(procDir, strconv.Itoa(pid), "status"))
	if err != nil {
		return Status{}, err
	}
	var st Status
	var gid, groups bool
	for l := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(l, "Gid:"); ok {
			f := strings.Fields(rest)
			if len(f) < 2 {
				return Status{}, fmt.Errorf("status Gid: %q: want real, effective, saved and fs gids", strings.TrimSpace(rest))
			}
			g, err := strconv.ParseUint(f[1], 10, 32)
			if err != nil {
				return Status{}, fmt.Errorf("status Gid: %q: %w", f[1], err)
			}
			st.GID, gid = uint32(g), true
			continue
		}
		rest, ok := strings.CutPrefix(l, "Groups:")
		if !ok {
			continue
		}
		for _, f := range strings.Fields(rest) {
			g, err := strconv.ParseUint(f, 10, 32)
			if err != nil {
				return Status{}, fmt.Errorf("status Groups: %q: %w", f, err)
			}
			st.Groups = append(st.Groups, uint32(g))
		}
		groups = true
	}
	switch {
	case !gid:
		return Status{}, errors.New("no Gid: line in status")
	case !groups:
		return Status{}, errors.New("no Groups: line in status")
	}
	return st, nil
}
