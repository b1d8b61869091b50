package checkpoint

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vcoil/vcoil/v2/pkg/formatversion"
)

// FuzzRead feeds read, the decoder of an entry file, with any bytes: a file
// truncated by a crash, edited by hand, or written by a newer vcoild. It
// must never panic, must refuse a newer format as such, and whatever it
// accepts has its key and block and survives being saved again unchanged
// (vcoild rewrites the entries it loads in the current format).
func FuzzRead(f *testing.F) {
	// The files of format 1, as the code wrote them before versions.
	fixtures, err := os.ReadDir("testdata/format1")
	if err != nil {
		f.Fatal(err)
	}
	for _, fx := range fixtures {
		data, err := os.ReadFile(filepath.Join("testdata/format1", fx.Name()))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	// An entry of today's format.
	current, err := json.Marshal(file{Format: formatversion.Checkpoint, Entry: format1Entries[0]})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(current)
	for _, s := range []string{
		// Truncated, empty and not an object.
		``, `{`, `{"containerID":`, `null`, `[]`, `"x"`, `{}`, `{"format":2}`,
		// A newer vcoild's file, whose entry does not decode as today's.
		`{"format":3,"containerID":"c0ffee","ifName":"eth0","block":{"name":"default-0","v":3}}`,
		`{"FORMAT":3,"containerID":"c0ffee","ifName":"eth0","block":"default-0"}`,
		// Wrong types and numbers out of range.
		`{"format":"2","containerID":"c0ffee","ifName":"eth0","block":"default-0"}`,
		`{"format":1e400,"containerID":"c0ffee","ifName":"eth0","block":"default-0"}`,
		`{"format":99999999999999999999,"containerID":"c","ifName":"eth0","block":"b"}`,
		`{"format":-1,"containerID":"c","ifName":"eth0","block":"b","offset":-7}`,
		`{"containerID":"c","ifName":"eth0","block":"b","offset":"7"}`,
		`{"containerID":"c","ifName":"eth0","block":"b","offset":1e20}`,
		`{"containerID":"c","ifName":"eth0","block":"b","mtu":-1,"portMappings":[{"hostPort":70000,"containerPort":80,"protocol":"tcp"}]}`,
		`{"containerID":"c","ifName":"eth0","block":"b","portMappings":[{"hostIP":"::ffff:1.2.3.4","hostPort":0,"containerPort":0,"protocol":""}]}`,
		// Addresses that do not parse, and ones that do in odd forms.
		`{"containerID":"c","ifName":"eth0","block":"b","ipv4":"10.0.0.300"}`,
		`{"containerID":"c","ifName":"eth0","block":"b","ipv4":7}`,
		`{"containerID":"c","ifName":"eth0","block":"b","ipv6":"fe80::1%eth0","ipv4":"::ffff:10.0.0.7"}`,
		`{"containerID":"c","ifName":"eth0","block":"b","sourcePrefixes":["198.51.100.0/24","10.0.0.1/8","fd00::/129"]}`,
		`{"containerID":"c","ifName":"eth0","block":"b","sourcePrefixes":[],"portMappings":[]}`,
		// Times that do not parse, and ones with an offset.
		`{"containerID":"c","ifName":"eth0","block":"b","created":"yesterday"}`,
		`{"containerID":"c","ifName":"eth0","block":"b","created":"2025-11-26T01:46:40.123456789+05:30"}`,
		`{"containerID":"c","ifName":"eth0","block":"b","created":"0000-01-01T00:00:00+23:59"}`,
		// A missing or empty key or block.
		`{"containerID":"","ifName":"eth0","block":"b"}`,
		`{"containerID":"c","ifName":"eth0"}`,
		// Keys with spaces, slashes, NULs and bytes that are not UTF-8.
		`{"containerID":"abc/../weird id","ifName":"eth 0/1","block":"default-3"}`,
		"{\"containerID\":\"c\\u0000d\",\"ifName\":\"\xff\xfe\",\"block\":\"b\"}",
		// The same key twice: the last one counts, for the version too.
		`{"format":3,"format":1,"containerID":"c","ifName":"eth0","block":"b"}`,
	} {
		f.Add([]byte(s))
	}

	dir := f.TempDir()
	path := filepath.Join(dir, "entry.json")
	f.Fuzz(func(t *testing.T, data []byte) {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		e, err := read(path)

		var ne *formatversion.NewerError
		if errors.As(err, &ne) {
			if !errors.Is(err, formatversion.ErrNewer) || ne.Found <= formatversion.Checkpoint || ne.Known != formatversion.Checkpoint || !strings.Contains(err.Error(), path) {
				t.Fatalf("refusal %v (found %d, known %d) is not one of a newer format naming %s", err, ne.Found, ne.Known, path)
			}
			return
		}
		if err != nil {
			if !strings.Contains(err.Error(), path) {
				t.Fatalf("error %q does not name the file", err)
			}
			return
		}
		if e.ContainerID == "" || e.IfName == "" || e.Block == "" {
			t.Fatalf("accepted an entry without its key or block: %+v", e)
		}
		var v struct {
			Format int `json:"format"`
		}
		if err := json.Unmarshal(data, &v); err != nil || v.Format > formatversion.Checkpoint {
			t.Fatalf("accepted a file of format %d (%v)", v.Format, err)
		}

		// Saved again as Save writes it, the entry reads back the same.
		again, err := json.Marshal(file{Format: formatversion.Checkpoint, Entry: e})
		if err != nil {
			t.Fatalf("an entry read from a file cannot be written: %v (%+v)", err, e)
		}
		if err := os.WriteFile(path, again, 0o600); err != nil {
			t.Fatal(err)
		}
		back, err := read(path)
		if err != nil {
			t.Fatalf("rewritten entry %s does not read: %v", again, err)
		}
		// Compared as written: a decoded zone offset is a new
		// *time.Location each time, and an empty list is written as none.
		twice, err := json.Marshal(file{Format: formatversion.Checkpoint, Entry: back})
		if err != nil || string(twice) != string(again) || back.ContainerID != e.ContainerID || back.IfName != e.IfName ||
			back.Block != e.Block || back.Offset != e.Offset || back.IPv4 != e.IPv4 || back.IPv6 != e.IPv6 || !back.Created.Equal(e.Created) {
			t.Fatalf("entry changed through a rewrite (%v):\n got %+v\nwant %+v\nwritten %s\nthen %s", err, back, e, again, twice)
		}
	})
}
