// Package version says which build of flowstate is running: the release
// version, the commit and the Go toolchain, for --version of every binary.
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Version is the release version, set at link time:
//
//	go build -ldflags '-X github.com/flowstate-io/flowstate/internal/version.Version=v1.2.0'
//
// Empty means: the module version recorded by the Go toolchain (set by
// `go install module@version`), else "devel".
var Version string

// Commit is the VCS revision, set at link time where the toolchain cannot
// read it (an image build whose context has no .git: deploy/Dockerfile):
//
//	go build -ldflags '-X github.com/flowstate-io/flowstate/internal/version.Commit=1c551f3a'
//
// Empty means: the revision the toolchain recorded (vcs.revision), if any.
var Commit string

// Info describes one build.
type Info struct {
	// Version is the release version or "devel".
	Version string
	// Commit is the VCS revision the binary was built from; empty when the
	// toolchain did not record it (go build outside a checkout, -buildvcs=false).
	Commit string
	// Modified is true when the work tree had uncommitted changes.
	Modified bool
	// GoVersion is the toolchain that built the binary.
	GoVersion string
}

// Get returns the running binary's build information.
func Get() Info {
	info := Info{Version: Version, Commit: Commit, GoVersion: runtime.Version()}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		if info.Version == "" {
			info.Version = "devel"
		}
		return info
	}
	if info.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		info.Version = bi.Main.Version
	}
	if info.Version == "" {
		info.Version = "devel"
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			info.Commit = s.Value
		case "vcs.modified":
			info.Modified = s.Value == "true"
		}
	}
	if Commit != "" {
		// The link-time revision names the tree the builder meant; what
		// the toolchain saw (if anything) may be a copy of it.
		info.Commit, info.Modified = Commit, false
	}
	return info
}

// String is the --version line, e.g.
// "flowctl v1.2.0 (commit 1c551f3a…, modified) go1.26.8 linux/amd64".
func (i Info) String(prog string) string {
	commit := i.Commit
	if commit == "" {
		commit = "unknown"
	}
	if i.Modified {
		commit += ", modified"
	}
	return fmt.Sprintf("%s %s (commit %s) %s %s/%s", prog, i.Version, commit, i.GoVersion, runtime.GOOS, runtime.GOARCH)
}
