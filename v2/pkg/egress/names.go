package egress

import (
	"crypto/sha256"
	"encoding/hex"
	"net/netip"
	"strings"

	"k8s.io/apimachinery/pkg/types"
)

// Device names and aliases. docs/egress.md lists them; change both together.
//
// Every device this package creates starts with linkPrefix, which the
// nftables rules match, and carries an alias starting with aliasTag, by
// which ApplyClient and Router.Setup recognise their own devices.
const (
	linkPrefix = "egr"
	aliasTag   = "vcoil-egress"

	// Client pods: one device per Egress, linkPrefix, 10 hex digits of a
	// hash of the Egress's namespace/name and a kind letter (x: VXLAN,
	// 4: IPIP in FoU, 6: IP6-in-IP6 in FoU); and the FoU fallback
	// receivers, which accept replies from any router.
	clientFallback4 = "egrfb4"
	clientFallback6 = "egrfb6"

	// Router pods: a VXLAN device per outer family, a FoU fallback
	// receiver per family, and per peer address a FoU device ("egrf4" or
	// "egrf6" and 10 hex digits of a hash of the address).
	routerVXLAN4   = "egrx4"
	routerVXLAN6   = "egrx6"
	routerFoU4     = "egrf4"
	routerFoU6     = "egrf6"
	routerVXLANPat = "egrx*"
	routerFoUPat   = "egrf*"
	allLinksPat    = "egr*"
)

func hash10(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:5])
}

// clientLinkName is the name of a client pod's device to egress; kind is
// "x", "4" or "6".
func clientLinkName(egress types.NamespacedName, kind string) string {
	return linkPrefix + hash10(egress.Namespace+"/"+egress.Name) + kind
}

func clientAlias(egress types.NamespacedName) string {
	return aliasTag + " " + egress.Namespace + "/" + egress.Name
}

// fallbackAlias labels the devices that belong to no single Egress.
const fallbackAlias = aliasTag + " fallback"

// routerAlias labels a router pod's devices.
const routerAlias = aliasTag + " router"

// routerPeerLinkName is the router's FoU device towards one peer address.
func routerPeerLinkName(peer netip.Addr) string {
	if peer.Is4() {
		return routerFoU4 + hash10(peer.String())
	}
	return routerFoU6 + hash10(peer.String())
}

func isOurs(alias string) bool {
	return alias == aliasTag || strings.HasPrefix(alias, aliasTag+" ")
}
