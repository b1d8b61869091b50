package main

import (
	"context"
	"errors"
	"net/http"
	"os"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/knftables"

	"github.com/vcoil/vcoil/v2/pkg/constants"
	"github.com/vcoil/vcoil/v2/pkg/daemon"
	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp"
	"github.com/vcoil/vcoil/v2/pkg/formatgate"
	"github.com/vcoil/vcoil/v2/pkg/formatversion"
	"github.com/vcoil/vcoil/v2/pkg/nodeevents"
)

// newerState reads the node's state before any part starts, changing
// nothing (package formatgate): the checkpoint, vcoil's nftables tables
// in the node's namespace and the egress table in the known pods', the
// node's link aliases and, on VPP, VPP's tags. It returns what is of a newer format than this
// vcoild's, nil when nothing is.
func (f flags) newerState(ctx context.Context) error {
	log := ctrl.Log.WithName("formats")
	dir := daemon.CheckpointDir(f.stateDir)
	egress := formatgate.Table{Family: knftables.InetFamily, Name: constants.EgressNFTable, Known: formatversion.KernelTable}
	checks := []formatgate.Check{
		formatgate.Checkpoint(dir),
		formatgate.NFTables(f.netns, []formatgate.Table{
			{Family: knftables.InetFamily, Name: constants.ServiceTable, Known: formatversion.ServiceTable},
			{Family: knftables.InetFamily, Name: constants.PolicyTable, Known: formatversion.PolicyTable},
			{Family: knftables.InetFamily, Name: constants.SourceTable, Known: formatversion.SourceTable},
			{Family: knftables.IPv4Family, Name: vpp.ServiceTable, Known: formatversion.KernelTable},
			{Family: knftables.IPv4Family, Name: vpp.HostPortTable, Known: formatversion.KernelTable},
			egress,
		}),
		formatgate.LinkAliases(f.netns),
	}
	if f.dataplane == "vpp" {
		// VPP's tags, when VPP is running: one that is not yet is read by
		// the dataplane once connected, whose refusal holds the CNI socket.
		checks = append(checks, formatgate.Check{Name: "VPP at " + f.vpp.apiSocket, Run: func(ctx context.Context) error {
			return vpp.NewerObjects(ctx, f.vpp.apiSocket, 0)
		}})
	}
	// Opening the checkpoint makes its directory: only read one that is.
	if _, err := os.Stat(dir); err == nil {
		pods, err := daemon.KnownPodNetns(f.stateDir)
		if err != nil {
			log.Info("cannot list the pods' namespaces; their egress tables are not checked before start", "error", err.Error())
		}
		for _, p := range pods {
			if p.Netns != "" {
				checks = append(checks, formatgate.NFTables(p.Netns, []formatgate.Table{egress}))
			}
		}
	}
	newer, other := formatgate.Scan(ctx, checks)
	if other != nil {
		log.Info("some of the node's state could not be read before start; the parts report what they meet", "error", other.Error())
	}
	return newer
}

// hold runs vcoild over state of a newer format (newer, from newerState):
// none of its parts starts, so nothing on the node or in the apiserver
// changes; it serves /healthz, /readyz (whose formats check fails with
// newer) and /metrics, says why in its log and in an Event on the Node,
// and stays up until ctx ends rather than exit into a restart loop whose
// reason scrolls away.
func (f flags) hold(ctx context.Context, cfg *rest.Config, scheme *runtime.Scheme, newer error) error {
	mgr, err := f.newManager(cfg, scheme, false)
	if err != nil {
		return err
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("formats", func(*http.Request) error { return newer }); err != nil {
		return err
	}
	events := nodeevents.New(mgr.GetEventRecorder("vcoild"), f.nodeName)
	log := ctrl.Log.WithName("setup")
	err = mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		events.Warning(daemon.ReasonNewerStateFormat, "Start", newer.Error()+"; this vcoild changes nothing and serves no pods")
		<-ctx.Done()
		return nil
	}))
	if err != nil {
		return err
	}
	log.Error(newer, "the node's state was written by a newer vcoild; this vcoild starts none of its parts (pods, blocks, routes, services, policies, egress) and changes nothing until a vcoild of that version or newer runs")
	return errors.Join(mgr.Start(ctx), newer)
}
