package daemon

import (
	"errors"
	"net/netip"
	"slices"

	"k8s.io/apimachinery/pkg/types"

	"github.com/vcoil/vcoil/v2/pkg/checkpoint"
	"github.com/vcoil/vcoil/v2/pkg/formatversion"
)

// The agents that run beside the daemon (policies, egress) read the
// checkpoint once at start, before their first sync: a restarted vcoild
// must not drop what it made for pods whose status does not list their
// addresses yet. The daemon owns the checkpoint, so it answers them.

// KnownPodAddresses reads the addresses of the pods this node's vcoild gave
// addresses to, by pod, from the checkpoint under stateDir (the policy
// agent's Known): every named entry's, each address once.
func KnownPodAddresses(stateDir string) (map[types.NamespacedName][]netip.Addr, error) {
	entries, err := knownEntries(stateDir)
	if err != nil {
		return nil, err
	}
	out := map[types.NamespacedName][]netip.Addr{}
	for _, e := range entries {
		if e.Name == "" {
			continue
		}
		key := types.NamespacedName{Namespace: e.Namespace, Name: e.Name}
		for _, a := range []netip.Addr{e.IPv4, e.IPv6} {
			if a.IsValid() && !slices.Contains(out[key], a) {
				out[key] = append(out[key], a)
			}
		}
	}
	return out, nil
}

// KnownPod is a pod of the checkpoint with its network namespace: where
// the egress agent sets up the pod's tunnels.
type KnownPod struct {
	Netns string
	IPs   []netip.Addr
}

// KnownPodNetns reads the pods of the checkpoint under stateDir that name
// their network namespace (the egress agent's Known). Of two entries of a
// pod, the one read last is kept.
func KnownPodNetns(stateDir string) (map[types.NamespacedName]KnownPod, error) {
	entries, err := knownEntries(stateDir)
	if err != nil {
		return nil, err
	}
	out := map[types.NamespacedName]KnownPod{}
	for _, e := range entries {
		if e.Name == "" || e.Netns == "" {
			continue
		}
		p := KnownPod{Netns: e.Netns}
		for _, a := range []netip.Addr{e.IPv4, e.IPv6} {
			if a.IsValid() {
				p.IPs = append(p.IPs, a)
			}
		}
		out[types.NamespacedName{Namespace: e.Namespace, Name: e.Name}] = p
	}
	return out, nil
}

// knownEntries reads the checkpoint for the agents. Files of a newer
// format are left to the daemon, which holds and reports them
// (docs/operations.md, "Formats and upgrades"): an agent failing here
// would make vcoild exit before it could say why.
func knownEntries(stateDir string) ([]checkpoint.Entry, error) {
	store, err := checkpoint.Open(CheckpointDir(stateDir))
	if err != nil {
		return nil, err
	}
	entries, err := store.Load()
	if err != nil && !errors.Is(err, formatversion.ErrNewer) {
		return nil, err
	}
	return entries, nil
}
