package main

import (
	"context"
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/flowstate-io/flowstate/internal/testenv"
)

// TestStatusJSONDocumented: every field name the table of `status -o json`
// in docs/operations.md lists is a key of the real output (protojson's
// lowerCamelCase, not the proto's snake_case).
func TestStatusJSONDocumented(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	doc, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(doc), "`status -o json` prints the `StatusResponse`")
	if !ok {
		t.Fatal("docs/operations.md has no status -o json section")
	}
	table, _, _ = strings.Cut(table, "\n### ")

	e := testenv.Start(ctx, t)
	srv := e.Config.Listen
	if _, stderr, code := flowctl(ctx, "", "--server", srv, "add-flow", "--module", "pipeline", "table=0,priority=1,ip,actions=drop"); code != 0 {
		t.Fatal(stderr)
	}
	if _, stderr, code := flowctl(ctx, "", "--server", srv, "reconcile"); code != 0 { // a lastReplay
		t.Fatal(stderr)
	}
	out, stderr, code := flowctl(ctx, "", "--server", srv, "status", "-o", "json")
	if code != 0 {
		t.Fatal(stderr)
	}
	var v any
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatal(err)
	}
	keys := map[string]bool{}
	var walk func(any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				keys[k] = true
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	walk(v)

	name := regexp.MustCompile("`([a-z][A-Za-z_]*)(\\[\\])?`")
	row := regexp.MustCompile(`(?m)^\| (.+?) \| (.+) \|$`)
	checked := 0
	for _, r := range row.FindAllStringSubmatch(table, -1) {
		field, meaning := r[1], r[2]
		if field == "Field" || strings.HasPrefix(field, "---") || strings.HasPrefix(field, "`quarantined[]`") {
			continue // the header; no entry is quarantined here
		}
		names := name.FindAllStringSubmatch(field, -1)
		if strings.Contains(field, "[]") || strings.Contains(field, ".") || field == "`gate`" || field == "`guard`" {
			// An object's row: its meaning lists the object's fields, up
			// to the first parenthesis of each item.
			for _, item := range strings.Split(meaning, ", ") {
				item, _, _ = strings.Cut(item, " (")
				for _, part := range strings.Split(item, "; ") {
					names = append(names, name.FindAllStringSubmatch(part, 1)...)
				}
			}
		}
		for _, n := range names {
			if n[1] == "null" || n[1] == "from" {
				continue
			}
			checked++
			if !keys[n[1]] {
				t.Errorf("docs/operations.md lists %q (row %s); status -o json has no such key", n[1], field)
			}
		}
	}
	if checked < 40 {
		t.Fatalf("only %d documented names checked: the table's form changed?", checked)
	}
	t.Logf("%d documented names found in status -o json", checked)
}
