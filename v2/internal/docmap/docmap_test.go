package docmap_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/vcoil/vcoil/v2/internal/docmap"
)

// The repository's root, from this package's directory.
var root = filepath.Join("..", "..", "..")

func TestDesignLayoutNamesEveryPackageAndOnlyPathsThatExist(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join(root, "docs", "design.md"))
	if err != nil {
		t.Fatal(err)
	}
	rows, err := docmap.Layout(doc)
	if err != nil {
		t.Fatalf("docs/design.md: %v", err)
	}
	missing, absent, err := docmap.Check(root, "v2", rows)
	if err != nil {
		t.Fatal(err)
	}
	if len(missing) > 0 {
		t.Errorf("docs/design.md's layout tables (section \"Layout\") name no row for these package directories; add them:\n  %s", strings.Join(missing, "\n  "))
	}
	if len(absent) > 0 {
		t.Errorf("docs/design.md's layout tables name paths that do not exist; move or remove their rows:\n  %s", strings.Join(absent, "\n  "))
	}
}

func TestLayoutReadsTheRowsOfTheLayoutSectionOnly(t *testing.T) {
	doc, err := os.ReadFile("testdata/design.md")
	if err != nil {
		t.Fatal(err)
	}
	rows, err := docmap.Layout(doc)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range rows {
		got = append(got, strings.Join(r.Paths, "+"))
	}
	want := []string{"v2/a", "v2/a/b+v2/gone", "hack/x"}
	if !slices.Equal(got, want) {
		t.Errorf("rows = %q, want %q", got, want)
	}
}

func TestCheckNamesMissingPackagesAndAbsentPaths(t *testing.T) {
	doc, err := os.ReadFile("testdata/design.md")
	if err != nil {
		t.Fatal(err)
	}
	rows, err := docmap.Layout(doc)
	if err != nil {
		t.Fatal(err)
	}
	missing, absent, err := docmap.Check("testdata/tree", "v2", rows)
	if err != nil {
		t.Fatal(err)
	}
	// v2/c has a .go file and no row; testdata and _skip are no packages;
	// v2/a/b counts although it holds tests only.
	if want := []string{"v2/c"}; !slices.Equal(missing, want) {
		t.Errorf("missing = %q, want %q", missing, want)
	}
	if len(absent) != 1 || !strings.HasPrefix(absent[0], "v2/gone (line 8)") {
		t.Errorf("absent = %q, want v2/gone (line 8)", absent)
	}
}

func TestLayoutRefusesCellsItCannotRead(t *testing.T) {
	for name, doc := range map[string]string{
		"no backquotes": "## Layout\n\n| v2/a | x |\n",
		"shorthand":     "## Layout\n\n| `v2/a`, .../b | x |\n",
		"and":           "## Layout\n\n| `v2/a` and `v2/b` | x |\n",
		"no section":    "## Other\n\n| `v2/a` | x |\n",
	} {
		if _, err := docmap.Layout([]byte(doc)); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
