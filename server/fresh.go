package server

import (
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
)

// missingPaths lists path and those of its parent directories that do not
// exist yet, deepest first: what opening a store at path creates.
func missingPaths(path string) []string {
	var out []string
	for p := filepath.Clean(path); p != filepath.Dir(p); p = filepath.Dir(p) {
		if _, err := os.Lstat(p); !errors.Is(err, fs.ErrNotExist) {
			break
		}
		out = append(out, p)
	}
	return out
}

// removeCreated removes what a failed start created (missingPaths), deepest
// first. A directory that is not empty stays: something else uses it now.
func removeCreated(log *slog.Logger, paths []string) {
	for _, p := range paths {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			log.Warn("the failed start could not remove what it created", "path", p, "err", err)
			return
		}
	}
	if len(paths) > 0 {
		log.Info("failed start: removed the store it had created", "path", paths[0])
	}
}
