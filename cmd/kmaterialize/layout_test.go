package main

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// TestDocsLayout keeps the layout table of docs/how-it-works.md equal to
// the tree: every path it names exists, and every directory holding a Go
// package (or the contrib files) is named by a row, or lies under a named
// directory whose row says what its subdirectories are.
func TestDocsLayout(t *testing.T) {
	doc := readDoc(t, "docs/how-it-works.md")
	start := strings.Index(doc, "## Layout")
	if start < 0 {
		t.Fatal("docs/how-it-works.md has no ## Layout section")
	}
	section := doc[start+len("## Layout"):]
	if end := strings.Index(section, "\n## "); end >= 0 {
		section = section[:end]
	}
	named := map[string]bool{}
	path := regexp.MustCompile("`([a-z0-9_./-]+/)`")
	for _, line := range strings.Split(section, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 3 || strings.TrimSpace(cells[1]) == "path" || strings.HasPrefix(strings.TrimSpace(cells[1]), "---") {
			continue
		}
		// The first cell names the paths; the second may name
		// subdirectories too (`bench/internal/kfakebroker/`).
		for _, cell := range cells[1:3] {
			for _, m := range path.FindAllStringSubmatch(cell, -1) {
				named[strings.TrimSuffix(m[1], "/")] = true
			}
		}
	}
	if len(named) == 0 {
		t.Fatal("the layout table names no path")
	}
	for p := range named {
		if st, err := os.Stat(filepath.Join(repoRoot, p)); err != nil || !st.IsDir() {
			t.Errorf("the layout table names %s/, which is not a directory of the repository", p)
		}
	}
	var missing []string
	err := filepath.WalkDir(repoRoot, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(repoRoot, p)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if strings.HasPrefix(d.Name(), ".") && rel != "." || d.Name() == "testdata" && rel != "testdata" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") {
			return nil
		}
		dir := filepath.ToSlash(filepath.Dir(rel))
		if dir == "." || covered(named, dir) {
			return nil
		}
		missing = append(missing, dir)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(missing)
	for i, dir := range missing {
		if i == 0 || missing[i-1] != dir {
			t.Errorf("%s/ holds Go code, but docs/how-it-works.md's layout table does not name it (add a row saying what it owns)", dir)
		}
	}
}

// covered says whether dir or a directory above it is named: contrib/
// covers contrib/examples/go; cmd/ is no row, so each command under it
// needs its own.
func covered(named map[string]bool, dir string) bool {
	for d := dir; d != "." && d != ""; d = filepath.ToSlash(filepath.Dir(d)) {
		if named[d] {
			return true
		}
	}
	return false
}
