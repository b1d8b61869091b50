package vpp

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/vcoil/vcoil/v2/pkg/dataplane"
	"github.com/vcoil/vcoil/v2/pkg/formatversion"
)

// VPP keeps at most 63 bytes of an interface tag (string[64] in
// sw_interface_details), and a containerd container ID alone is 64 hex
// digits. A tag therefore takes the first of these forms that fits:
//
//	vcoil@2 <containerID> <ifname>           readable, for short IDs
//	vcoil64@2 <base64url(ID bytes)> <ifname> a hex ID in 43 characters
//	vcoil#@2 <base64url(sha256(key))[:32]>   anything else; the key comes back
//	                                         from vcoild's allocations or a veth alias
//
// "@2" is the tags' format version (formatversion.VPPTag). Version 1 tags, written
// before format versions, are the same without it ("vcoil c0ffee eth0",
// "vcoil-loopback"): the first sync after an upgrade re-tags them
// (upgradeTag), which changes nothing else, and a tag of a newer version
// stops the sync before it changes anything (formatversion.CheckTag).
const (
	tagPrefix       = "vcoil"
	tagPrefixBase64 = "vcoil64"
	tagPrefixHash   = "vcoil#"
	maxTag          = 63

	// vethPrefix starts the node end of an af_packet pod veth, tapPrefix
	// the temporary name of a tun created in the node namespace before it
	// moves to a pod whose namespace path VPP cannot take.
	vethPrefix = "vcvpp"
	tapPrefix  = "vctap"
	// aliasPrefix is the kind of the alias of an af_packet pod veth's node
	// end: "vcoil-vpp@2 <containerID> <ifname>". Unlike the tag it has room for
	// any key, so ListPods recovers hashed tags through it.
	aliasPrefix = "vcoil-vpp"
	maxAlias    = 255
)

// Tags of the node's own interfaces.
var (
	loopbackTag     = formatversion.Tag("vcoil-loopback")
	interconnectTag = formatversion.Tag("vcoil-host")
)

// podTag is the VPP interface tag of a pod interface.
func podTag(key dataplane.PodKey) string {
	if t := formatversion.Tag(tagPrefix, key.ContainerID, key.IfName); len(t) <= maxTag {
		return t
	}
	if b, err := hex.DecodeString(key.ContainerID); err == nil && strings.ToLower(key.ContainerID) == key.ContainerID {
		if t := formatversion.Tag(tagPrefixBase64, base64.RawURLEncoding.EncodeToString(b), key.IfName); len(t) <= maxTag {
			return t
		}
	}
	return hashedTag(key)
}

func hashedTag(key dataplane.PodKey) string { return formatversion.Tag(tagPrefixHash, keyHash(key)) }

// keyHash is the hash of a key that hashed tags carry.
func keyHash(key dataplane.PodKey) string {
	sum := sha256.Sum256([]byte(key.ContainerID + "/" + key.IfName))
	return base64.RawURLEncoding.EncodeToString(sum[:])[:32]
}

// parsedTag is what a tag says: a key, or only a hash of one.
type parsedTag struct {
	key    dataplane.PodKey
	hashed bool
	tag    string
}

// parsePodTag reads a pod interface tag of this version or the previous
// one; false for a tag that is not a pod's (the node's interfaces, someone
// else's, a newer vcoil's).
func parsePodTag(tag string) (parsedTag, bool) {
	kind, v, rest, ok := formatversion.ParseTag(tag)
	if !ok || v > formatversion.VPPTag {
		return parsedTag{}, false
	}
	f := strings.Split(rest, " ")
	switch {
	case len(f) == 2 && kind == tagPrefix:
		key := dataplane.PodKey{ContainerID: f[0], IfName: f[1]}
		return parsedTag{key: key, tag: tag}, validateKey(key) == nil
	case len(f) == 2 && kind == tagPrefixBase64:
		b, err := base64.RawURLEncoding.DecodeString(f[0])
		if err != nil {
			return parsedTag{}, false
		}
		key := dataplane.PodKey{ContainerID: hex.EncodeToString(b), IfName: f[1]}
		return parsedTag{key: key, tag: tag}, validateKey(key) == nil
	case len(f) == 1 && kind == tagPrefixHash && len(f[0]) == 32:
		return parsedTag{hashed: true, tag: tag}, true
	}
	return parsedTag{}, false
}

// upgradeTag is the current version's spelling of a version 1 interface
// tag of vcoil's, and false for any other tag (current, newer, foreign).
// A pod's tag is made again from its key, since the longer marker may
// need another form.
func upgradeTag(tag string) (string, bool) {
	kind, v, rest, ok := formatversion.ParseTag(tag)
	if !ok || v != 1 {
		return "", false
	}
	switch kind {
	case tagPrefix, tagPrefixBase64:
		if t, ok := parsePodTag(tag); ok {
			return podTag(t.key), true
		}
	case tagPrefixHash:
		if _, ok := parsePodTag(tag); ok {
			return formatversion.Tag(tagPrefixHash, rest), true
		}
	case "vcoil-loopback", "vcoil-host", "vcoil-snat-split", "vcoil-snat-nat":
		if rest == "" {
			return formatversion.Tag(kind), true
		}
	}
	return "", false
}

// linkName is a kernel interface name made of prefix and 10 hex digits of a
// hash of the key: 15 characters, the kernel's limit, derived from the key
// alone so that a pod can be torn down without its namespace.
func linkName(prefix string, key dataplane.PodKey) string {
	sum := sha256.Sum256([]byte(key.ContainerID + "/" + key.IfName))
	return prefix + hex.EncodeToString(sum[:5])
}

// vethAlias is "vcoil-vpp@2 <containerID> <ifname>" (formatversion.VPPTag);
// parseVethAlias also reads format 1's "vcoil-vpp <containerID> <ifname>".
func vethAlias(key dataplane.PodKey) string {
	return formatversion.Tag(aliasPrefix, key.ContainerID, key.IfName)
}

func parseVethAlias(alias string) (dataplane.PodKey, bool) {
	kind, v, rest, ok := formatversion.ParseTag(alias)
	if !ok || kind != aliasPrefix || v > formatversion.VPPTag {
		return dataplane.PodKey{}, false
	}
	f := strings.Split(rest, " ")
	if len(f) != 2 {
		return dataplane.PodKey{}, false
	}
	key := dataplane.PodKey{ContainerID: f[0], IfName: f[1]}
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
