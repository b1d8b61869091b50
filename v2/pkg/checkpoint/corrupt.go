package checkpoint

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"github.com/vcoil/vcoil/v2/pkg/atomicfile"
)

// ErrCorrupt is what every CorruptError matches (errors.Is).
var ErrCorrupt = errors.New("checkpoint file cannot be decoded")

// CorruptSuffix is appended to the name of a file that is set aside.
const CorruptSuffix = ".corrupt"

// CorruptError is a checkpoint file of this vcoild's format or older that
// cannot be decoded as an entry (damaged bytes, a missing key or block).
// Unlike a file of a newer format, no vcoild can read it: its owner sets it
// aside rather than stop on it.
type CorruptError struct {
	// Path is the file's path.
	Path string
	// Partial holds the fields that still decode on their own; the others
	// are zero. HasOffset tells a decoded offset 0 from a missing one.
	Partial   Entry
	HasOffset bool
	Err       error
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("checkpoint file %s cannot be decoded: %v", e.Path, e.Err)
}

func (e *CorruptError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrCorrupt) true.
func (e *CorruptError) Is(target error) bool { return target == ErrCorrupt }

func corrupt(path string, data []byte, err error) *CorruptError {
	ce := &CorruptError{Path: path, Err: err}
	ce.Partial, ce.HasOffset = partial(data)
	return ce
}

// partial decodes each field of a damaged file on its own, so that one bad
// field does not hide what the others say.
func partial(data []byte) (e Entry, hasOffset bool) {
	var fields map[string]json.RawMessage
	if json.Unmarshal(data, &fields) != nil {
		return Entry{}, false
	}
	str := func(name string, into *string) {
		if raw, ok := fields[name]; ok && json.Unmarshal(raw, into) != nil {
			*into = ""
		}
	}
	addr := func(name string, into *netip.Addr) {
		if raw, ok := fields[name]; ok && json.Unmarshal(raw, into) != nil {
			*into = netip.Addr{}
		}
	}
	str("containerID", &e.ContainerID)
	str("ifName", &e.IfName)
	str("netns", &e.Netns)
	str("namespace", &e.Namespace)
	str("name", &e.Name)
	str("pool", &e.Pool)
	str("block", &e.Block)
	addr("ipv4", &e.IPv4)
	addr("ipv6", &e.IPv6)
	if raw, ok := fields["offset"]; ok {
		hasOffset = json.Unmarshal(raw, &e.Offset) == nil && e.Offset >= 0
		if !hasOffset {
			e.Offset = 0
		}
	}
	return e, hasOffset
}

// LoadAll returns every entry, every file that cannot be decoded, and the
// other errors (a directory that cannot be read, files that cannot be read,
// files of a newer format: errors.Is(err, formatversion.ErrNewer)).
func (s *Store) LoadAll() ([]Entry, []*CorruptError, error) {
	files, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, nil, fmt.Errorf("read checkpoint directory %s: %w", s.dir, err)
	}
	var out []Entry
	var bad []*CorruptError
	var errs []error
	for _, f := range files {
		if f.IsDir() || !strings.HasSuffix(f.Name(), suffix) || strings.HasPrefix(f.Name(), ".") {
			continue
		}
		e, err := read(filepath.Join(s.dir, f.Name()))
		var ce *CorruptError
		switch {
		case errors.As(err, &ce):
			bad = append(bad, ce)
		case err != nil:
			errs = append(errs, err)
		default:
			out = append(out, e)
		}
	}
	return out, bad, errors.Join(errs...)
}

// SetAside renames a file that cannot be decoded to its name with
// CorruptSuffix, durably, and returns the new path: Load, Get and Save no
// longer see it, and Corrupted lists it until RemoveCorrupt.
func (s *Store) SetAside(path string) (string, error) {
	if filepath.Dir(path) != filepath.Clean(s.dir) || !strings.HasSuffix(path, suffix) {
		return "", fmt.Errorf("set aside %s: not an entry file of %s", path, s.dir)
	}
	aside := path + CorruptSuffix
	if err := os.Rename(path, aside); err != nil {
		return "", fmt.Errorf("set aside checkpoint file %s: %w", path, err)
	}
	if err := atomicfile.SyncDir(s.dir); err != nil {
		return "", fmt.Errorf("set aside checkpoint file %s: %w", path, err)
	}
	return aside, nil
}

// Corrupted lists the files set aside, each with what its fields still say.
func (s *Store) Corrupted() ([]*CorruptError, error) {
	files, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, fmt.Errorf("read checkpoint directory %s: %w", s.dir, err)
	}
	var out []*CorruptError
	var errs []error
	for _, f := range files {
		if f.IsDir() || !strings.HasSuffix(f.Name(), suffix+CorruptSuffix) || strings.HasPrefix(f.Name(), ".") {
			continue
		}
		path := filepath.Join(s.dir, f.Name())
		data, err := os.ReadFile(path)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, corrupt(path, data, errors.New("set aside")))
	}
	return out, errors.Join(errs...)
}

// RemoveCorrupt removes a file set aside, once what it recorded is released.
func (s *Store) RemoveCorrupt(path string) error {
	if filepath.Dir(path) != filepath.Clean(s.dir) || !strings.HasSuffix(path, suffix+CorruptSuffix) {
		return fmt.Errorf("remove %s: not a checkpoint file set aside in %s", path, s.dir)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove checkpoint file set aside %s: %w", path, err)
	}
	return atomicfile.SyncDir(s.dir)
}
