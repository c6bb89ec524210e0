package server_test

import (
	"errors"
	"go/build"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// layers are flowstate's packages from the bottom up, as docs/architecture.md
// draws them: a package under server/ imports only packages of lower layers,
// so the rooms of the engine never reach back into the coordinator, nor
// into each other.
var layers = [][]string{
	{"api/flowstate/v1", "entry", "errdefs", "internal/version", "ofctl"},
	{"canon", "errdefs/errgrpc", "store"},
	{"ofmods"},
	{"server/events", "server/ofconn", "server/ovsconfig", "server/peercred", "server/unixctl"},
	{"server/ofproxy"},
	{"server/guard", "server/restore/plan"},
	{"server/restore/flag", "server/restore/forms", "server/restore/gate", "server/restore/mirror", "server/restore/poison"},
	{"server/restore/bridge"},
	{"server/restore/owner", "server/restore/replay", "server/restore/vswitchd", "server/restore/write"},
	{"server/restore"},
	{"server"},
}

const module = "github.com/flowstate-io/flowstate/"

func TestImportsPointDown(t *testing.T) {
	layer := map[string]int{}
	for i, l := range layers {
		for _, p := range l {
			layer[p] = i
		}
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	err = filepath.WalkDir(filepath.Join(root, "server"), func(dir string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		if d.Name() == "testdata" {
			return filepath.SkipDir
		}
		pkg, err := build.Default.ImportDir(dir, 0)
		var none *build.NoGoError
		if errors.As(err, &none) {
			return nil
		}
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, dir)
		rel = filepath.ToSlash(rel)
		own, ok := layer[rel]
		if !ok {
			t.Errorf("package %s is in no layer: add it to layers (and to docs/architecture.md's graph)", rel)
			return nil
		}
		for _, imp := range pkg.Imports {
			dep, ours := strings.CutPrefix(imp, module)
			if !ours {
				continue
			}
			if l, known := layer[dep]; !known || l >= own {
				t.Errorf("%s (layer %d) imports %s (layer %d): imports must point down", rel, own, dep, l)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
