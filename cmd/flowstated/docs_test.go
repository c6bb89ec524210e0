package main

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// TestDocsFlagTable: the flag table of docs/operations.md ("flowstated
// flags") names every flag of flowstated --help, and no other.
func TestDocsFlagTable(t *testing.T) {
	b, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n### flowstated flags\n")
	if !ok {
		t.Fatal("docs/operations.md has no \"### flowstated flags\" section")
	}
	section, _, _ = strings.Cut(section, "\n### ")
	var documented []string
	for _, m := range regexp.MustCompile("(?m)^\\| `--([a-z0-9-]+)").FindAllStringSubmatch(section, -1) {
		documented = append(documented, m[1])
	}
	var flags []string
	newCommand().Flags().VisitAll(func(f *pflag.Flag) { flags = append(flags, f.Name) })
	for _, f := range flags {
		if !slices.Contains(documented, f) {
			t.Errorf("--%s is in --help but not in the docs' table", f)
		}
	}
	for _, f := range documented {
		if !slices.Contains(flags, f) {
			t.Errorf("--%s is in the docs' table but not in --help", f)
		}
	}
}
