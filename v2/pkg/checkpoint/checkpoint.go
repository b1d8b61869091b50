// Package checkpoint keeps vcoild's durable record of the addresses it gave to
// pod interfaces: one small file per (container ID, interface name), replaced
// through atomicfile (temporary file, fsync, rename, fsync of the directory),
// so that a daemon killed at any instant finds every allocation it made, whole
// or not at all. It knows nothing of IPAM or dataplanes.
//
// Every file carries its format version (Entry.Format, formatversion.Checkpoint):
// files without one (format 1, written before versions) are read as they
// are; a file of a newer format is refused with a formatversion.NewerError naming
// it, and never rewritten or deleted by this code. A file that cannot be
// decoded at all (a CorruptError, with what its fields still say) is the
// caller's to set aside (SetAside, Corrupted, RemoveCorrupt), so that it
// stops neither a start nor its pod's DEL.
package checkpoint

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"github.com/vcoil/vcoil/v2/pkg/atomicfile"
	"github.com/vcoil/vcoil/v2/pkg/formatversion"
)

// Entry records one pod interface's allocation.
type Entry struct {
	ContainerID string     `json:"containerID"`
	IfName      string     `json:"ifName"`
	Netns       string     `json:"netns,omitempty"`
	Namespace   string     `json:"namespace,omitempty"`
	Name        string     `json:"name,omitempty"`
	Pool        string     `json:"pool"`
	Block       string     `json:"block"`
	Offset      int        `json:"offset"`
	IPv4        netip.Addr `json:"ipv4,omitzero"`
	IPv6        netip.Addr `json:"ipv6,omitzero"`
	// MTU is the pod interface's MTU from the network configuration (0: the
	// dataplane's), so that a rewired pod keeps it.
	MTU int `json:"mtu,omitempty"`
	// PortMappings are the pod's hostPorts from its ADD, kept for a
	// dataplane that serves them itself (VPP) and must make them again
	// after a restart.
	PortMappings []PortMapping `json:"portMappings,omitempty"`
	// SourcePrefixes are the sources the pod may use besides its addresses
	// (its allowed-source-prefixes annotation as read at its first ADD), so
	// that a restarted vcoild wires it identically. The field is optional and
	// did not raise the format: a vcoild that predates it ignores it and
	// wires the pod with its own addresses only, which fails closed (the
	// pod's other sources are dropped) rather than open.
	SourcePrefixes []netip.Prefix `json:"sourcePrefixes,omitempty"`
	// NoChecksumOffload is the pod's checksum choice as made at its first
	// ADD (dataplane.Pod.NoChecksumOffload), so that a restarted vcoild or
	// VPP wires it identically. Optional, like SourcePrefixes: a vcoild
	// that predates it wires the pod with offload.
	NoChecksumOffload bool      `json:"noChecksumOffload,omitempty"`
	Created           time.Time `json:"created"`
}

// PortMapping is one hostPort of an entry: HostIP (zero: every address of
// the node), HostPort and Protocol ("tcp", "udp", "sctp") to the pod's
// ContainerPort.
type PortMapping struct {
	HostIP        netip.Addr `json:"hostIP,omitzero"`
	HostPort      uint16     `json:"hostPort"`
	ContainerPort uint16     `json:"containerPort"`
	Protocol      string     `json:"protocol"`
}

// file is an entry as a file holds it: with its format version first.
// Format 2 only added the field: a file without it (version 1) decodes
// unchanged.
type file struct {
	Format int `json:"format"`
	Entry
}

// Store is a directory of entries.
type Store struct {
	dir string
}

const suffix = ".json"

// Open creates dir if needed (mode 0700) and removes temporary files that a
// killed writer left behind.
func Open(dir string) (*Store, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create checkpoint directory %s: %w", dir, err)
	}
	if err := atomicfile.RemoveTemps(dir); err != nil {
		return nil, fmt.Errorf("clean checkpoint directory %s: %w", dir, err)
	}
	return &Store{dir: dir}, nil
}

// Dir is the store's directory.
func (s *Store) Dir() string { return s.dir }

// fileName derives a file name from the key, whatever characters the
// container ID holds.
func fileName(containerID, ifName string) string {
	sum := sha256.Sum256([]byte(containerID + "\x00" + ifName))
	return hex.EncodeToString(sum[:16]) + suffix
}

// Save writes e durably in the current format, replacing an earlier entry
// of the same key, unless that entry is of a newer format (a
// formatversion.NewerError): a file this vcoild cannot read is never overwritten.
func (s *Store) Save(e Entry) error {
	path := filepath.Join(s.dir, fileName(e.ContainerID, e.IfName))
	if _, err := read(path); errors.Is(err, formatversion.ErrNewer) {
		return fmt.Errorf("checkpoint %s/%s: %w", e.ContainerID, e.IfName, err)
	}
	data, err := json.Marshal(file{Format: formatversion.Checkpoint, Entry: e})
	if err != nil {
		return err
	}
	if err := atomicfile.WriteFile(path, data, 0o600); err != nil {
		return fmt.Errorf("checkpoint %s/%s: %w", e.ContainerID, e.IfName, err)
	}
	return nil
}

// Delete removes the entry of a key; a missing entry is not an error, an
// entry of a newer format is refused (formatversion.NewerError) and kept.
func (s *Store) Delete(containerID, ifName string) error {
	path := filepath.Join(s.dir, fileName(containerID, ifName))
	if _, err := read(path); errors.Is(err, formatversion.ErrNewer) {
		return fmt.Errorf("delete checkpoint of %s/%s: %w", containerID, ifName, err)
	}
	err := os.Remove(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("delete checkpoint of %s/%s: %w", containerID, ifName, err)
	}
	return atomicfile.SyncDir(s.dir)
}

// Get returns the entry of a key, and false when there is none.
func (s *Store) Get(containerID, ifName string) (Entry, bool, error) {
	e, err := read(filepath.Join(s.dir, fileName(containerID, ifName)))
	if errors.Is(err, fs.ErrNotExist) {
		return Entry{}, false, nil
	}
	if err != nil {
		return Entry{}, false, err
	}
	return e, true, nil
}

// Load returns every entry. A file that cannot be read or decoded is
// reported in the error, and the entries that could be read are returned;
// errors.Is(err, formatversion.ErrNewer) tells that a file is of a newer format,
// which a caller must not take for a lost entry, and errors.Is(err,
// ErrCorrupt) that a file cannot be decoded (LoadAll tells them apart).
func (s *Store) Load() ([]Entry, error) {
	out, bad, err := s.LoadAll()
	errs := []error{err}
	for _, ce := range bad {
		errs = append(errs, ce)
	}
	return out, errors.Join(errs...)
}

func read(path string) (Entry, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Entry{}, err
	}
	// The version is read first: a newer format may not decode as an Entry.
	var v struct {
		Format int `json:"format"`
	}
	if err := json.Unmarshal(data, &v); err != nil {
		return Entry{}, corrupt(path, data, err)
	}
	if err := formatversion.Check("checkpoint file "+path, v.Format, formatversion.Checkpoint); err != nil {
		return Entry{}, err
	}
	var f file
	if err := json.Unmarshal(data, &f); err != nil {
		return Entry{}, corrupt(path, data, err)
	}
	e := f.Entry
	if e.ContainerID == "" || e.IfName == "" || e.Block == "" {
		return Entry{}, corrupt(path, data, errors.New("it lacks its key or block"))
	}
	return e, nil
}
