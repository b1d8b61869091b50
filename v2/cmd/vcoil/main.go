// Command vcoil is the CNI plugin binary. The container runtime runs it
// for every CNI call; it forwards the call to vcoild over the UNIX socket
// named in its configuration and prints vcoild's result or error. All of
// its logic is in package cni. See docs/vcoil-cni.md.
package main

import (
	"os"

	"github.com/containernetworking/cni/pkg/skel"

	"github.com/vcoil/vcoil/v2/pkg/cni"
	"github.com/vcoil/vcoil/v2/pkg/cnicontract"
)

func main() {
	skel.PluginMainFuncs(cni.NewPlugin(os.Stdout).Funcs(), cnicontract.PluginInfo(),
		"vcoil: CNI plugin that forwards each call to vcoild (docs/vcoil-cni.md)")
}
