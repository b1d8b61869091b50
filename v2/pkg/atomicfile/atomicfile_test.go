package atomicfile_test

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/vcoil/vcoil/v2/pkg/atomicfile"
)

// names lists dir's entries.
func names(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

func wantFile(t *testing.T, path, content string, mode os.FileMode) {
	t.Helper()
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != content {
		t.Fatalf("%s holds %q, want %q", path, got, content)
	}
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if info.Mode() != mode {
		t.Fatalf("%s has mode %v, want %v", path, info.Mode(), mode)
	}
}

func TestWriteFileCreatesTheFileWithItsModeAndLeavesNoTemporaryFile(t *testing.T) {
	for _, mode := range []os.FileMode{0o600, 0o644, 0o755} {
		dir := t.TempDir()
		path := filepath.Join(dir, "10-vcoil.conflist")
		if err := atomicfile.WriteFile(path, []byte("content"), mode); err != nil {
			t.Fatal(err)
		}
		wantFile(t, path, "content", mode)
		if got := names(t, dir); !slices.Equal(got, []string{"10-vcoil.conflist"}) {
			t.Fatalf("directory holds %v, want only the file", got)
		}
	}
}

func TestWriteFileReplacesAnExistingFileAndItsMode(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "tls.key")
	if err := os.WriteFile(path, []byte("an old and longer content"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A reader that opened the old file keeps reading it whole.
	old, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	if err := atomicfile.WriteFile(path, []byte("new"), 0o600); err != nil {
		t.Fatal(err)
	}
	wantFile(t, path, "new", 0o600)
	buf := make([]byte, 64)
	n, _ := old.Read(buf)
	if string(buf[:n]) != "an old and longer content" {
		t.Fatalf("the open old file reads %q", buf[:n])
	}
	if got := names(t, dir); !slices.Equal(got, []string{"tls.key"}) {
		t.Fatalf("directory holds %v, want only the file", got)
	}
}

func TestWriteFileThatFailsLeavesNoTemporaryFileAndThePathAsItWas(t *testing.T) {
	dir := t.TempDir()
	// A directory cannot be replaced by a file: the rename fails.
	path := filepath.Join(dir, "taken")
	if err := os.Mkdir(path, 0o755); err != nil {
		t.Fatal(err)
	}
	err := atomicfile.WriteFile(path, []byte("content"), 0o644)
	if err == nil {
		t.Fatal("replacing a directory succeeded")
	}
	if got := names(t, dir); !slices.Equal(got, []string{"taken"}) {
		t.Fatalf("directory holds %v after the failure, want only what was there", got)
	}
	if info, err := os.Stat(path); err != nil || !info.IsDir() {
		t.Fatalf("the directory at %s is gone: %v", path, err)
	}
}

func TestWriteFileIntoAMissingDirectoryFails(t *testing.T) {
	path := filepath.Join(t.TempDir(), "missing", "file")
	if err := atomicfile.WriteFile(path, []byte("content"), 0o644); err == nil {
		t.Fatal("writing into a missing directory succeeded")
	}
}

func TestRemoveTempsRemovesOnlyTemporaryFiles(t *testing.T) {
	dir := t.TempDir()
	if err := atomicfile.WriteFile(filepath.Join(dir, "kept.json"), []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	// What a writer killed between creating and renaming leaves behind.
	if err := os.WriteFile(filepath.Join(dir, ".tmp-kept.json-123"), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := atomicfile.RemoveTemps(dir); err != nil {
		t.Fatal(err)
	}
	if got := names(t, dir); !slices.Equal(got, []string{"kept.json"}) {
		t.Fatalf("directory holds %v, want only kept.json", got)
	}
}
