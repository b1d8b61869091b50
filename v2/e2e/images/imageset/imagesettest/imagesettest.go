// Package imagesettest reads tarballs (archives and layers) back for the
// tests of the code that writes images.
package imagesettest

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"testing"
)

// Entries reads a tarball: every entry's header by name, and the contents
// of each regular file. An entry written twice is a test error.
func Entries(t testing.TB, r io.Reader) (map[string]*tar.Header, map[string][]byte) {
	t.Helper()
	hdrs, data := map[string]*tar.Header{}, map[string][]byte{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return hdrs, data
		}
		if err != nil {
			t.Fatal(err)
		}
		if _, dup := hdrs[h.Name]; dup {
			t.Errorf("entry %s written twice", h.Name)
		}
		hdrs[h.Name] = h
		if h.Typeflag != tar.TypeReg {
			continue
		}
		if data[h.Name], err = io.ReadAll(tr); err != nil {
			t.Fatal(err)
		}
	}
}

// FileEntries reads the tarball in the file at path.
func FileEntries(t testing.TB, path string) (map[string]*tar.Header, map[string][]byte) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	return Entries(t, f)
}

// BytesEntries reads the tarball held in data.
func BytesEntries(t testing.TB, data []byte) (map[string]*tar.Header, map[string][]byte) {
	t.Helper()
	return Entries(t, bytes.NewReader(data))
}
