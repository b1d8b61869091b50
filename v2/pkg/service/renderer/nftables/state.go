package nftables

import "github.com/vcoil/vcoil/v2/pkg/service"

// Rendering is how the renderer serves the model, for the node's state
// (service.Frontends): kube-proxy's semantics in both families, except
// that IPv6 frontends keep a client on one backend by a hash of its
// address, without the affinity's timeout (see setAffinity).
func Rendering() service.Rendering {
	return service.Rendering{Name: "nftables", AffinityByHashIPv6: true}
}
