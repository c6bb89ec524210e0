package deploy

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// anchors are the GitHub anchors of the headings of a markdown file.
func anchors(t *testing.T, file string) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	inCode := false
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "```") {
			inCode = !inCode
		}
		if inCode || !strings.HasPrefix(line, "#") {
			continue
		}
		out[githubAnchor(strings.TrimLeft(line, "# "))] = true
	}
	return out
}

// githubAnchor is GitHub's anchor of a heading: lower case, spaces to
// hyphens, punctuation other than hyphens and underscores dropped.
func githubAnchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9':
			b.WriteRune(r)
		}
	}
	return b.String()
}

// TestRunbookURLs: every alert has a runbook_url, and each names a section
// of docs/operations.md that exists.
func TestRunbookURLs(t *testing.T) {
	b, err := os.ReadFile("prometheus/flowstate-alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert       string            `json:"alert"`
				Annotations map[string]string `json:"annotations"`
			} `json:"rules"`
		} `json:"groups"`
	}
	if err := yaml.Unmarshal(b, &rules); err != nil {
		t.Fatal(err)
	}
	have := anchors(t, "../docs/operations.md")
	const prefix = "https://github.com/flowstate-io/flowstate/blob/main/docs/operations.md#"
	n := 0
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			n++
			url := r.Annotations["runbook_url"]
			anchor, ok := strings.CutPrefix(url, prefix)
			if !ok {
				t.Errorf("%s: runbook_url %q is not a section of docs/operations.md", r.Alert, url)
				continue
			}
			if !have[anchor] {
				t.Errorf("%s: runbook_url anchor #%s is no heading of docs/operations.md", r.Alert, anchor)
			}
		}
	}
	if n < 14 {
		t.Errorf("%d alerts read, want at least 14", n)
	}
}

// TestDocLinks: the links within docs/operations.md to its own sections
// lead somewhere.
func TestDocLinks(t *testing.T) {
	have := anchors(t, "../docs/operations.md")
	b, _ := os.ReadFile("../docs/operations.md")
	for _, m := range regexp.MustCompile(`\]\(#([^)]+)\)`).FindAllStringSubmatch(string(b), -1) {
		if !have[m[1]] {
			t.Errorf("docs/operations.md links to #%s, which no heading makes", m[1])
		}
	}
}
