package deploy

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestSafetyMatrixNamesTests: every row of the restart safety matrix in
// docs/operations.md names a test in its last column, and every test it
// names (up to a subtest's "/") is a Test or Fuzz function of the module.
// The matrix is the promise "never worse than plain Open vSwitch" written
// out fault by fault; a row whose test was renamed or removed is a promise
// no longer checked.
func TestSafetyMatrixNamesTests(t *testing.T) {
	b, err := os.ReadFile("../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	start := strings.Index(doc, "\n### Restart safety matrix\n")
	if start < 0 {
		t.Fatal(`docs/operations.md has no "### Restart safety matrix"`)
	}
	section := doc[start+1:]
	if end := strings.Index(section, "\n## "); end >= 0 {
		section = section[:end]
	}

	defined := map[string]bool{}
	fn := regexp.MustCompile(`(?m)^func ((?:Test|Fuzz)\w+)\(`)
	err = filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range fn.FindAllStringSubmatch(string(src), -1) {
			defined[m[1]] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	named := regexp.MustCompile("`((?:Test|Fuzz)[A-Za-z0-9_]+)[^`]*`")
	rows := 0
	for _, line := range strings.Split(section, "\n") {
		if !strings.HasPrefix(line, "|") || strings.HasPrefix(line, "|---") || strings.HasPrefix(line, "| ---") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		last := cells[len(cells)-1]
		if strings.TrimSpace(last) == "Test" { // the header
			continue
		}
		rows++
		tests := named.FindAllStringSubmatch(last, -1)
		if len(tests) == 0 {
			t.Errorf("safety matrix row %.80q… names no test", strings.TrimSpace(cells[0]))
		}
		for _, m := range tests {
			if !defined[m[1]] {
				t.Errorf("safety matrix row %.80q… names %s, which no _test.go of the module defines", strings.TrimSpace(cells[0]), m[1])
			}
		}
	}
	if rows < 40 {
		t.Errorf("the safety matrix has %d rows; the table was not read (want more than 40)", rows)
	}
}
