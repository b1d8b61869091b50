package daemon

import (
	"github.com/vcoil/vcoil/v2/pkg/checkpoint"
	"github.com/vcoil/vcoil/v2/pkg/dataplane"
)

// Allocations are the pods vcoild has given addresses to, as its checkpoint
// under StateDir records them. vcoild hands them to a dataplane that must
// know them when it starts, before the daemon does (VPP, which does not
// record a pod's namespace); it satisfies vpp.Allocations.
type Allocations struct {
	StateDir string
}

// Pods reads the checkpoint. An entry that cannot be read is named in the
// error, and the pods of the others are returned.
func (a Allocations) Pods() ([]dataplane.Pod, error) {
	store, err := checkpoint.Open(CheckpointDir(a.StateDir))
	if err != nil {
		return nil, err
	}
	return podsOf(store)
}

func podsOf(store *checkpoint.Store) ([]dataplane.Pod, error) {
	entries, err := store.Load()
	pods := make([]dataplane.Pod, 0, len(entries))
	for _, e := range entries {
		pods = append(pods, podOf(e))
	}
	return pods, err
}
