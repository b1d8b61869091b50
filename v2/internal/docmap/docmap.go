// Package docmap checks docs/design.md's layout tables against the tree:
// every Go package directory must be named by a row, and every path a row
// names must exist, so that the map of the code cannot drift from it
// unnoticed.
//
// The tables are those of the section "## Layout" (up to the next "## "
// heading). The first cell of each row holds one path or several, each in
// backquotes and written out in full from the repository's root, separated
// by ", ": "| `v2/pkg/a`, `v2/pkg/b` | what |". A first cell of any other
// shape is an error, so that the table stays readable by this check.
package docmap

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// Row is one row of a layout table.
type Row struct {
	Line  int
	Paths []string
}

var cellPath = regexp.MustCompile("^`([^`\\s]+)`$")

// Layout reads the rows of the layout tables of a Markdown document: the
// tables of the section headed "## Layout". Header rows ("| path | what |")
// and separator rows are skipped; fenced code blocks are not tables.
func Layout(doc []byte) ([]Row, error) {
	var rows []Row
	var errs []error
	in, found, fenced := false, false, false
	sc := bufio.NewScanner(bytes.NewReader(doc))
	n := 0
	for sc.Scan() {
		n++
		line := sc.Text()
		if strings.HasPrefix(line, "```") {
			fenced = !fenced
			continue
		}
		if fenced {
			continue
		}
		if strings.HasPrefix(line, "## ") {
			in = strings.TrimSpace(line) == "## Layout"
			found = found || in
			continue
		}
		if !in || !strings.HasPrefix(line, "|") {
			continue
		}
		if strings.Trim(line, "|-: ") == "" {
			continue // the separator row
		}
		cells := strings.Split(line, " | ")
		first := strings.TrimSpace(strings.TrimPrefix(cells[0], "|"))
		if first == "path" {
			continue // the header row
		}
		row := Row{Line: n}
		for _, part := range strings.Split(first, ", ") {
			m := cellPath.FindStringSubmatch(part)
			if m == nil {
				errs = append(errs, fmt.Errorf("line %d: %q is not a path in backquotes (write each path in full, separated by \", \")", n, part))
				continue
			}
			row.Paths = append(row.Paths, strings.TrimSuffix(m[1], "/"))
		}
		rows = append(rows, row)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if !found {
		return nil, errors.New(`no section "## Layout"`)
	}
	return rows, errors.Join(errs...)
}

// PackageDirs lists, relative to root and with slashes, every directory
// under root/sub that holds a .go file, leaving out testdata directories
// and those Go ignores (names starting with "." or "_").
func PackageDirs(root, sub string) ([]string, error) {
	seen := map[string]bool{}
	err := filepath.WalkDir(filepath.Join(root, sub), func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if name == "testdata" || (path != filepath.Join(root, sub) && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_"))) {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(name, ".go") {
			rel, err := filepath.Rel(root, filepath.Dir(path))
			if err != nil {
				return err
			}
			seen[filepath.ToSlash(rel)] = true
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	dirs := make([]string, 0, len(seen))
	for d := range seen {
		dirs = append(dirs, d)
	}
	slices.Sort(dirs)
	return dirs, nil
}

// Check compares the layout rows with the tree at root: the package
// directories under root/sub that no row names, and the named paths that
// do not exist (each with its line). Both empty means the map is true.
func Check(root, sub string, rows []Row) (missing, absent []string, err error) {
	dirs, err := PackageDirs(root, sub)
	if err != nil {
		return nil, nil, err
	}
	named := map[string]bool{}
	for _, r := range rows {
		for _, p := range r.Paths {
			named[p] = true
			if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(p))); err != nil {
				absent = append(absent, fmt.Sprintf("%s (line %d)", p, r.Line))
			}
		}
	}
	for _, d := range dirs {
		if !named[d] {
			missing = append(missing, d)
		}
	}
	return missing, absent, nil
}
