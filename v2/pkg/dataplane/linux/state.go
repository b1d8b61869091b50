package linux

import (
	"context"
	"fmt"

	"github.com/vcoil/vcoil/v2/pkg/dataplane"
	"github.com/vcoil/vcoil/v2/pkg/nodestate"
)

// PodInterfaces returns, for the node state, the node-side veth of every
// pod interface the node holds: the links ListPods recognises (a vcoil
// alias and the name derived from its key), with their ifindex.
func (d *linuxDataplane) PodInterfaces(ctx context.Context) (map[dataplane.PodKey]nodestate.Interface, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	node, err := d.openNode()
	if err != nil {
		return nil, fmt.Errorf("list pod interfaces: %w", err)
	}
	defer node.Close()
	links, err := dump(node.NL.LinkList)
	if err != nil {
		return nil, fmt.Errorf("list pod interfaces: list links in %s: %w", node.Path, err)
	}
	out := map[dataplane.PodKey]nodestate.Interface{}
	for _, l := range links {
		key, ok := parseHostAlias(l.Attrs().Alias)
		if !ok || l.Type() != "veth" || l.Attrs().Name != HostIfName(key) {
			continue
		}
		out[key] = nodestate.Interface{Kind: "veth", Name: l.Attrs().Name, Index: uint32(l.Attrs().Index)}
	}
	return out, nil
}
