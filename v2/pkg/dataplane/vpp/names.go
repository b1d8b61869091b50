package vpp

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/vcoil/vcoil/v2/pkg/dataplane"
)

// VPP keeps at most 63 bytes of an interface tag (string[64] in
// sw_interface_details), and a containerd container ID alone is 64 hex
// digits. A tag therefore takes the first of these forms that fits:
//
//	vcoil <containerID> <ifname>           readable, for short IDs
//	vcoil64 <base64url(ID bytes)> <ifname> a hex ID in 43 characters
//	vcoil# <base64url(sha256(key))[:32]>   anything else; the key comes back
//	                                       from vcoild's allocations or a veth alias
const (
	tagPrefix       = "vcoil"
	tagPrefixBase64 = "vcoil64"
	tagPrefixHash   = "vcoil#"
	maxTag          = 63

	// Tags of the node's own interfaces.
	loopbackTag     = "vcoil-loopback"
	interconnectTag = "vcoil-host"

	// vethPrefix starts the node end of an af_packet pod veth, tapPrefix
	// the temporary name of a tun created in the node namespace before it
	// moves to a pod whose namespace path VPP cannot take.
	vethPrefix = "vcvpp"
	tapPrefix  = "vctap"
	// aliasPrefix starts the alias of an af_packet pod veth's node end:
	// "vcoil-vpp <containerID> <ifname>". Unlike the tag it has room for
	// any key, so ListPods recovers hashed tags through it.
	aliasPrefix = "vcoil-vpp"
	maxAlias    = 255
)

// podTag is the VPP interface tag of a pod interface.
func podTag(key dataplane.PodKey) string {
	if t := tagPrefix + " " + key.ContainerID + " " + key.IfName; len(t) <= maxTag {
		return t
	}
	if b, err := hex.DecodeString(key.ContainerID); err == nil && strings.ToLower(key.ContainerID) == key.ContainerID {
		if t := tagPrefixBase64 + " " + base64.RawURLEncoding.EncodeToString(b) + " " + key.IfName; len(t) <= maxTag {
			return t
		}
	}
	return hashedTag(key)
}

func hashedTag(key dataplane.PodKey) string {
	sum := sha256.Sum256([]byte(key.ContainerID + "/" + key.IfName))
	return tagPrefixHash + " " + base64.RawURLEncoding.EncodeToString(sum[:])[:32]
}

// parsedTag is what a tag says: a key, or only a hash of one.
type parsedTag struct {
	key    dataplane.PodKey
	hashed bool
	tag    string
}

// parsePodTag reads a pod interface tag; false for a tag that is not a
// pod's (the node's interfaces, someone else's).
func parsePodTag(tag string) (parsedTag, bool) {
	f := strings.Split(tag, " ")
	switch {
	case len(f) == 3 && f[0] == tagPrefix:
		key := dataplane.PodKey{ContainerID: f[1], IfName: f[2]}
		return parsedTag{key: key, tag: tag}, validateKey(key) == nil
	case len(f) == 3 && f[0] == tagPrefixBase64:
		b, err := base64.RawURLEncoding.DecodeString(f[1])
		if err != nil {
			return parsedTag{}, false
		}
		key := dataplane.PodKey{ContainerID: hex.EncodeToString(b), IfName: f[2]}
		return parsedTag{key: key, tag: tag}, validateKey(key) == nil
	case len(f) == 2 && f[0] == tagPrefixHash && len(f[1]) == 32:
		return parsedTag{hashed: true, tag: tag}, true
	}
	return parsedTag{}, false
}

// linkName is a kernel interface name made of prefix and 10 hex digits of a
// hash of the key: 15 characters, the kernel's limit, derived from the key
// alone so that a pod can be torn down without its namespace.
func linkName(prefix string, key dataplane.PodKey) string {
	sum := sha256.Sum256([]byte(key.ContainerID + "/" + key.IfName))
	return prefix + hex.EncodeToString(sum[:5])
}

func vethAlias(key dataplane.PodKey) string {
	return aliasPrefix + " " + key.ContainerID + " " + key.IfName
}

func parseVethAlias(alias string) (dataplane.PodKey, bool) {
	f := strings.Split(alias, " ")
	if len(f) != 3 || f[0] != aliasPrefix {
		return dataplane.PodKey{}, false
	}
	key := dataplane.PodKey{ContainerID: f[1], IfName: f[2]}
	return key, validateKey(key) == nil
}

// afPacketName is VPP's name of an af_packet interface on a host link.
func afPacketName(hostIf string) string { return "host-" + hostIf }

// validateKey checks the key (dataplane.PodKey.Validate) and that it fits
// the alias recording it.
func validateKey(key dataplane.PodKey) error {
	if err := key.Validate(); err != nil {
		return err
	}
	if n := len(vethAlias(key)); n > maxAlias {
		return fmt.Errorf("container ID %q: too long to record (alias of %d bytes, limit %d)", key.ContainerID, n, maxAlias)
	}
	return nil
}

func describe(key dataplane.PodKey) string { return key.ContainerID + "/" + key.IfName }
