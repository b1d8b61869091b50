package linux

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/vcoil/vcoil/v2/pkg/dataplane"
	"github.com/vcoil/vcoil/v2/pkg/formatversion"
)

// aliasTag is the kind of the alias (IFLA_IFALIAS) of every node-side
// veth: "vcoil@2 <containerID> <ifname>" ("@2": formatversion.VPPTag, the format
// of vcoil's tags and aliases). The alias is how ListPods recognises
// vcoil's veths and recovers their keys after vcoild restarts; the name
// alone is a hash and cannot be reversed. Veths of format 1, aliased
// "vcoil <containerID> <ifname>" before format versions, are read as they
// are and keep their alias; one of a newer format stops ListPods.
const aliasTag = "vcoil"

// maxAlias is the kernel's limit on an alias (IFALIASZ - 1).
const maxAlias = 255

// HostIfName is the name of the node-side veth of a pod interface: "vcoil"
// and 10 hex digits of a SHA-256 of the container ID and the interface name,
// 15 characters, the kernel's limit. It depends on nothing else, so a pod can
// be torn down from its key alone, with its namespace and addresses gone.
func HostIfName(key dataplane.PodKey) string {
	sum := sha256.Sum256([]byte(key.ContainerID + "/" + key.IfName))
	return HostIfPrefix + hex.EncodeToString(sum[:5])
}

func hostAlias(key dataplane.PodKey) string {
	return formatversion.Tag(aliasTag, key.ContainerID, key.IfName)
}

// parseHostAlias returns the key recorded in a node-side veth's alias of
// this format or the previous one, and false for an alias that is not
// vcoil's (or is a newer vcoil's: newerAlias).
func parseHostAlias(alias string) (dataplane.PodKey, bool) {
	kind, v, rest, ok := formatversion.ParseTag(alias)
	if !ok || kind != aliasTag || v > formatversion.VPPTag {
		return dataplane.PodKey{}, false
	}
	f := strings.Split(rest, " ")
	if len(f) != 2 {
		return dataplane.PodKey{}, false
	}
	key := dataplane.PodKey{ContainerID: f[0], IfName: f[1]}
	if validateKey(key) != nil {
		return dataplane.PodKey{}, false
	}
	return key, true
}

// newerAlias refuses the alias of a link that a newer vcoil made
// (formatversion.NewerError naming the link).
func newerAlias(link, alias string) error {
	if kind, _, _, ok := formatversion.ParseTag(alias); !ok || kind != aliasTag {
		return nil
	}
	return formatversion.CheckTag("link "+link, alias)
}

// validateKey checks the key (dataplane.PodKey.Validate) and that it fits
// the alias recording it.
func validateKey(key dataplane.PodKey) error {
	if err := key.Validate(); err != nil {
		return err
	}
	if n := len(hostAlias(key)); n > maxAlias {
		return fmt.Errorf("container ID %q: too long to record (alias of %d bytes, limit %d)", key.ContainerID, n, maxAlias)
	}
	return nil
}
