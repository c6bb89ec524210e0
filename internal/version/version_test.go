package version

import (
	"runtime"
	"strings"
	"testing"
)

func TestString(t *testing.T) {
	for _, tc := range []struct {
		name string
		info Info
		want string
	}{
		{"release", Info{Version: "v1.2.0", Commit: "abc", GoVersion: "go1.26.8"}, "flowctl v1.2.0 (commit abc) go1.26.8 "},
		{"modified", Info{Version: "devel", Commit: "abc", Modified: true, GoVersion: "go1.26.8"}, "flowctl devel (commit abc, modified) go1.26.8 "},
		{"no vcs", Info{Version: "devel", GoVersion: "go1.26.8"}, "flowctl devel (commit unknown) go1.26.8 "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.info.String("flowctl")
			if !strings.HasPrefix(got, tc.want) || !strings.HasSuffix(got, runtime.GOOS+"/"+runtime.GOARCH) {
				t.Fatalf("got %q, want %q + GOOS/GOARCH", got, tc.want)
			}
		})
	}
}

func TestGetLinkTimeVersionWins(t *testing.T) {
	defer func(v string) { Version = v }(Version)
	Version = "v9.9.9"
	if got := Get(); got.Version != "v9.9.9" || got.GoVersion != runtime.Version() {
		t.Fatalf("Get() = %+v", got)
	}
	Version = ""
	if got := Get(); got.Version == "" {
		t.Fatal("Get() without a link-time version has an empty Version")
	}
}

// TestGetLinkTimeCommit: a commit set with -X (an image build, whose
// context has no .git) is the one reported, not modified.
func TestGetLinkTimeCommit(t *testing.T) {
	defer func(c string) { Commit = c }(Commit)
	Commit = "0123abcd"
	if got := Get(); got.Commit != "0123abcd" || got.Modified {
		t.Fatalf("Get() = %+v, want commit 0123abcd, not modified", got)
	}
}
