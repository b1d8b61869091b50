package cnat

import "github.com/vcoil/vcoil/v2/pkg/service"

// Rendering is how the renderer serves the model, for the node's state
// (service.Frontends): both families; TCP and UDP only; every client of an
// eTP=Local external frontend goes to the local endpoints (a translation
// matches protocol, VIP and port only); ClientIP affinity by a hash of the
// client's address, without timeout, in both families.
func Rendering() service.Rendering {
	return service.Rendering{Name: "cnat", NoSCTP: true, LocalForAll: true, AffinityByHash: true}
}
