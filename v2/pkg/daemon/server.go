package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"time"

	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vcoilv2 "github.com/vcoil/vcoil/v2/api/v2"
	"github.com/vcoil/vcoil/v2/pkg/checkpoint"
	"github.com/vcoil/vcoil/v2/pkg/cnicontract"
	"github.com/vcoil/vcoil/v2/pkg/cnirpc"
	"github.com/vcoil/vcoil/v2/pkg/dataplane"
	"github.com/vcoil/vcoil/v2/pkg/formatversion"
	"github.com/vcoil/vcoil/v2/pkg/ipam"
	"github.com/vcoil/vcoil/v2/pkg/nodeevents"
	"github.com/vcoil/vcoil/v2/pkg/nodeipam"
)

// AddressManager is what the server needs from node IPAM
// (nodeipam.NodeIPAM).
type AddressManager interface {
	Allocate(ctx context.Context, pool string) (ipam.Allocation, error)
	Restore(block string, offset int) (ipam.Allocation, error)
	Lookup(addr netip.Addr) (block string, offset int, ok bool)
	Free(ctx context.Context, a ipam.Allocation) error
	Ready() error
	NATLoopback() ipam.NATLoopback
	NodeSubnet() ipam.Block
	Blocks() []ipam.BlockUsage
}

// PodPolicies is the NetworkPolicy stack as the CNI service sees it
// (policy/agent.Agent): a new pod's rules must be in the dataplane before
// its ADD returns, and a released pod's addresses must leave the policies
// before another pod gets them.
type PodPolicies interface {
	PodAdded(ctx context.Context, namespace, name string, ips []netip.Addr) error
	PodReleased(ctx context.Context, namespace, name string)
}

// PodEgress is the Egress client side as the CNI service sees it
// (egress/agent.Agent): a new pod's tunnels are set up before its ADD
// returns; a released pod is forgotten.
type PodEgress interface {
	PodAdded(ctx context.Context, namespace, name, netns string, ips []netip.Addr) error
	PodReleased(ctx context.Context, namespace, name string)
}

// vcoild reads namespaces for their pool annotation (role "daemon").
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch

// Server implements the CNI gRPC service.
type Server struct {
	cnirpc.UnimplementedCNIServer

	ipam       AddressManager
	dp         dataplane.Dataplane
	store      *checkpoint.Store
	namespaces client.Reader
	policies   PodPolicies
	egress     PodEgress
	nodeName   string
	metrics    *Metrics
	log        logr.Logger
	recorder   events.EventRecorder
	pods       client.Reader
	podCache   client.Reader
	keys       *keyLock
	now        func() time.Time
	// events records on the Node what concerns no single live pod: the
	// checkpoint files that cannot be decoded (nil: none).
	events *nodeevents.Recorder
	// held are the checkpoint files set aside and what is held for them.
	held heldFiles
	// gone are the sweep's sightings of absent network namespaces.
	gone goneSince
}

// Config wires a Server.
type Config struct {
	IPAM      AddressManager
	Dataplane dataplane.Dataplane
	Store     *checkpoint.Store
	// Namespaces reads Namespaces (the manager's cache) for their pool
	// annotation.
	Namespaces client.Reader
	NodeName   string
	Metrics    *Metrics
	Log        logr.Logger
	// Policies may be nil: no NetworkPolicies are enforced.
	Policies PodPolicies
	// Egress may be nil: no Egress client side.
	Egress PodEgress
	// Recorder, when set, records Warning Events on pods whose pool gives
	// them no address (pool_events.go); Pods reads those pods, and an
	// ADD's pod that PodCache does not hold (the manager's API reader).
	Recorder events.EventRecorder
	Pods     client.Reader
	// PodCache, when set, reads the node's pods from the manager's cache
	// (trimmed by the policy agent's TrimPod, which keeps the annotations
	// an ADD reads): an ADD whose pod it holds under the sandbox's UID
	// spares the apiserver a read, a round trip that a busy apiserver
	// makes the slowest part of an ADD. Nil: vcoild caches no pods (its
	// policies and egress side are off), and every ADD reads Pods.
	PodCache client.Reader
	// NodeEvents, when set, records Events on the Node (checkpoint files
	// that cannot be decoded).
	NodeEvents *nodeevents.Recorder
}

// NewServer returns the CNI service.
func NewServer(cfg Config) *Server {
	return &Server{
		ipam: cfg.IPAM, dp: cfg.Dataplane, store: cfg.Store, namespaces: cfg.Namespaces, policies: cfg.Policies, egress: cfg.Egress,
		nodeName: cfg.NodeName, metrics: cfg.Metrics, log: cfg.Log,
		recorder: cfg.Recorder, pods: cfg.Pods, podCache: cfg.PodCache,
		keys: newKeyLock(), now: time.Now, events: cfg.NodeEvents,
		held: heldFiles{byPath: map[string]*heldFile{}}, gone: goneSince{first: map[string]time.Time{}},
	}
}

func key(containerID, ifName string) string { return containerID + "/" + ifName }

// Add gives the pod interface an address and wires it. It is idempotent per
// (container ID, interface): a repeated ADD returns the same addresses.
func (s *Server) Add(ctx context.Context, args *cnirpc.CNIArgs) (resp *cnirpc.AddResponse, err error) {
	defer s.metrics.observe("ADD", time.Now(), &err)
	if err := validateArgs(args, true); err != nil {
		return nil, err
	}
	if err := validateKey(args); err != nil {
		return nil, err
	}
	conf, err := cnicontract.ParseConf(args.StdinData)
	if err != nil {
		return nil, cnicontract.ToRPCError(err) // keeps ParseConf's code and the field it names
	}
	portMappings, err := conf.PortMappings()
	if err != nil {
		return nil, cnicontract.ToRPCError(err)
	}
	if _, err := os.Stat(args.Netns); err != nil {
		return nil, cniError(cnirpc.ErrorCode_INVALID_ENVIRONMENT_VARIABLES, "", "network namespace %q of container %s: %v", args.Netns, args.ContainerId, err)
	}
	unlock := s.keys.lock(key(args.ContainerId, args.Ifname))
	defer unlock()
	log := s.log.WithValues("containerID", args.ContainerId, "ifname", args.Ifname, "pod", podRef(args))

	entry, found, err := s.store.Get(args.ContainerId, args.Ifname)
	if err != nil {
		return nil, cniError(cnirpc.ErrorCode_IO_FAILURE, "", "read checkpoint of %s: %v", key(args.ContainerId, args.Ifname), err)
	}
	since := time.Now()
	if !found {
		if err := s.ipam.Ready(); err != nil {
			return nil, cniError(cnirpc.ErrorCode_TRY_AGAIN_LATER, "", "vcoild on node %s is not ready: %v", s.nodeName, err)
		}
		pool, err := s.poolOf(ctx, args.Args[argPodNamespace])
		if err != nil {
			return nil, err
		}
		opts, err := s.podOptionsOf(ctx, args)
		if err != nil {
			return nil, err
		}
		s.metrics.phase(PhaseRead, &since)
		a, err := s.ipam.Allocate(ctx, pool)
		if err != nil {
			cerr := allocationError(pool, args.Args[argPodNamespace], err)
			s.reportPoolError(ctx, args, err, cerr)
			return nil, cerr
		}
		entry = checkpoint.Entry{
			ContainerID: args.ContainerId, IfName: args.Ifname, Netns: args.Netns,
			Namespace: args.Args[argPodNamespace], Name: args.Args[argPodName],
			Pool: a.Pool, Block: a.Block, Offset: a.Offset, IPv4: a.IPv4, IPv6: a.IPv6,
			MTU: conf.MTU, PortMappings: checkpointMappings(portMappings), SourcePrefixes: opts.sourcePrefixes,
			NoChecksumOffload: opts.noChecksumOffload, Created: s.now().UTC(),
		}
		if err := s.store.Save(entry); err != nil {
			s.freeOrLog(ctx, log, a)
			return nil, cniError(cnirpc.ErrorCode_IO_FAILURE, "", "checkpoint allocation of %s: %v", key(args.ContainerId, args.Ifname), err)
		}
		log.Info("allocated address", "pool", a.Pool, "block", a.Block, "ipv4", addrString(a.IPv4), "ipv6", addrString(a.IPv6))
		s.metrics.phase(PhaseAllocate, &since)
	}

	pod := podOf(entry)
	pod.Netns = args.Netns
	pod.Namespace, pod.Name = args.Args[argPodNamespace], args.Args[argPodName]
	pod.MTU = conf.MTU
	pod.PortMappings = portMappings
	ifs, err := s.dp.SetupPod(ctx, pod)
	s.metrics.phase(PhaseWire, &since)
	var ips []netip.Addr
	for _, a := range []netip.Addr{entry.IPv4, entry.IPv6} {
		if a.IsValid() {
			ips = append(ips, a)
		}
	}
	if err == nil && s.policies != nil {
		// The pod's rules are in before its first packet: its containers
		// start only after ADD returns.
		if perr := s.policies.PodAdded(ctx, pod.Namespace, pod.Name, ips); perr != nil {
			if !found {
				s.policies.PodReleased(ctx, pod.Namespace, pod.Name)
			}
			err = fmt.Errorf("%w: %w", errPolicies, perr)
		}
		s.metrics.phase(PhasePolicies, &since)
	}
	if err == nil && s.egress != nil {
		if eerr := s.egress.PodAdded(ctx, pod.Namespace, pod.Name, args.Netns, ips); eerr != nil {
			if !found {
				s.egress.PodReleased(ctx, pod.Namespace, pod.Name)
				if s.policies != nil {
					s.policies.PodReleased(ctx, pod.Namespace, pod.Name)
				}
			}
			err = fmt.Errorf("%w: %w", errEgress, eerr)
		}
		s.metrics.phase(PhaseEgress, &since)
	}
	if err != nil {
		if !found {
			// A new allocation that could not be wired is undone whole.
			if terr := s.dp.TeardownPod(ctx, pod); terr != nil {
				log.Error(terr, "cannot undo a failed pod set-up")
			} else {
				s.freeOrLog(ctx, log, allocationOf(entry))
				if derr := s.store.Delete(entry.ContainerID, entry.IfName); derr != nil {
					log.Error(derr, "cannot delete checkpoint of an undone pod")
				}
			}
		}
		if errors.Is(err, errPolicies) || errors.Is(err, errEgress) {
			return nil, cniError(cnirpc.ErrorCode_TRY_AGAIN_LATER, "", "pod interface %s: %v", key(args.ContainerId, args.Ifname), err)
		}
		return nil, cniError(dataplaneCode(err), "", "wire pod interface %s with %s dataplane: %v", key(args.ContainerId, args.Ifname), s.dp.Name(), err)
	}
	if cm := checkpointMappings(portMappings); entry.Netns != args.Netns || entry.MTU != conf.MTU || !slices.Equal(entry.PortMappings, cm) {
		entry.Netns, entry.MTU, entry.PortMappings = args.Netns, conf.MTU, cm
		if err := s.store.Save(entry); err != nil {
			log.Error(err, "cannot update the checkpoint")
		}
	}

	result, err := buildResult(args, entry, ifs)
	if err != nil {
		return nil, cniError(cnirpc.ErrorCode_INTERNAL, "", "encode result: %v", err)
	}
	return &cnirpc.AddResponse{Result: result}, nil
}

// Del unwires the pod interface and frees its address. It succeeds when the
// container, its namespace or its allocation is already gone.
func (s *Server) Del(ctx context.Context, args *cnirpc.CNIArgs) (_ *cnirpc.Empty, err error) {
	defer s.metrics.observe("DEL", time.Now(), &err)
	if err := validateArgs(args, false); err != nil {
		return nil, err
	}
	unlock := s.keys.lock(key(args.ContainerId, args.Ifname))
	defer unlock()
	entry, found, err := s.store.Get(args.ContainerId, args.Ifname)
	if ce := (*checkpoint.CorruptError)(nil); errors.As(err, &ce) {
		// No vcoild can read it: failing would fail every DEL of the pod.
		s.corruptAtDel(ce, args.ContainerId, args.Ifname)
		err = nil
	}
	if err != nil {
		return nil, cniError(cnirpc.ErrorCode_IO_FAILURE, "", "read checkpoint of %s: %v", key(args.ContainerId, args.Ifname), err)
	}
	if !found {
		// Nothing recorded: still ask the dataplane, which may hold what a
		// lost checkpoint entry described.
		entry = checkpoint.Entry{ContainerID: args.ContainerId, IfName: args.Ifname}
	}
	if err := s.release(ctx, entry, found, args.Netns); err != nil {
		return nil, err
	}
	for _, h := range s.heldFor(args.ContainerId, args.Ifname, args.Netns) {
		s.releaseHeld(ctx, h)
	}
	return &cnirpc.Empty{}, nil
}

// release tears a pod interface down, frees its address and forgets it. The
// caller holds the key's lock.
func (s *Server) release(ctx context.Context, entry checkpoint.Entry, found bool, netns string) error {
	pod := podOf(entry)
	if netns != "" {
		pod.Netns = netns
	}
	// A key no dataplane accepts was never wired: ADD refuses it (an older
	// vcoild recorded such keys before their wiring failed), and asking the
	// dataplane would fail this DEL forever.
	if pod.PodKey.Validate() == nil {
		if err := s.dp.TeardownPod(ctx, pod); err != nil {
			return cniError(cnirpc.ErrorCode_TRY_AGAIN_LATER, "", "tear down pod interface %s: %v", key(entry.ContainerID, entry.IfName), err)
		}
	}
	if !found {
		return nil
	}
	log := s.log.WithValues("containerID", entry.ContainerID, "ifname", entry.IfName)
	if s.policies != nil && entry.Name != "" {
		s.policies.PodReleased(ctx, entry.Namespace, entry.Name)
	}
	if s.egress != nil && entry.Name != "" {
		s.egress.PodReleased(ctx, entry.Namespace, entry.Name)
	}
	s.freeOrLog(ctx, log, allocationOf(entry))
	if err := s.store.Delete(entry.ContainerID, entry.IfName); err != nil {
		return cniError(cnirpc.ErrorCode_IO_FAILURE, "", "%v", err)
	}
	log.Info("released address", "ipv4", addrString(entry.IPv4), "ipv6", addrString(entry.IPv6))
	return nil
}

// Check reports whether the pod interface is wired as vcoild wired it.
func (s *Server) Check(ctx context.Context, args *cnirpc.CNIArgs) (_ *cnirpc.Empty, err error) {
	defer s.metrics.observe("CHECK", time.Now(), &err)
	if err := validateArgs(args, true); err != nil {
		return nil, err
	}
	if err := validateKey(args); err != nil {
		return nil, err
	}
	unlock := s.keys.lock(key(args.ContainerId, args.Ifname))
	defer unlock()
	entry, found, err := s.store.Get(args.ContainerId, args.Ifname)
	if err != nil {
		return nil, cniError(cnirpc.ErrorCode_IO_FAILURE, "", "read checkpoint: %v", err)
	}
	if !found {
		return nil, cniError(cnirpc.ErrorCode_UNKNOWN_CONTAINER, "", "vcoild on node %s has no address for %s", s.nodeName, key(args.ContainerId, args.Ifname))
	}
	pod := podOf(entry)
	pod.Netns = args.Netns
	if conf, err := cnicontract.ParseConf(args.StdinData); err == nil {
		pod.MTU = conf.MTU
		if ms, err := conf.PortMappings(); err == nil {
			pod.PortMappings = ms
		}
	}
	if err := s.dp.CheckPod(ctx, pod); err != nil {
		return nil, cniError(dataplaneCode(err), "", "pod interface %s: %v", key(args.ContainerId, args.Ifname), err)
	}
	return &cnirpc.Empty{}, nil
}

// Status tells whether vcoild can add pods, and publishes the node's NAT
// loopback and node subnet.
func (s *Server) Status(ctx context.Context, _ *cnirpc.Empty) (_ *cnirpc.StatusResponse, err error) {
	defer s.metrics.observe("STATUS", time.Now(), &err)
	if err := s.ipam.Ready(); err != nil {
		return nil, cniError(cnirpc.ErrorCode_PLUGIN_NOT_AVAILABLE, "", "vcoild on node %s: %v", s.nodeName, err)
	}
	if err := s.dp.Healthy(ctx); err != nil {
		return nil, cniError(cnirpc.ErrorCode_PLUGIN_NOT_AVAILABLE, "", "vcoild on node %s: %s dataplane: %v", s.nodeName, s.dp.Name(), err)
	}
	resp := &cnirpc.StatusResponse{NodeName: s.nodeName, Dataplane: s.dp.Name()}
	l := s.ipam.NATLoopback()
	for _, a := range []netip.Addr{l.IPv4, l.IPv6} {
		if a.IsValid() {
			resp.NatLoopback = append(resp.NatLoopback, a.String())
		}
	}
	b := s.ipam.NodeSubnet()
	for _, p := range []netip.Prefix{b.IPv4, b.IPv6} {
		if p.IsValid() {
			resp.NodeSubnet = append(resp.NodeSubnet, p.String())
		}
	}
	return resp, nil
}

// GC releases every pod interface the runtime no longer knows. Interfaces
// with an operation in flight are left for the next GC.
func (s *Server) GC(ctx context.Context, req *cnirpc.GCRequest) (_ *cnirpc.Empty, err error) {
	defer s.metrics.observe("GC", time.Now(), &err)
	valid := map[string]bool{}
	for _, a := range req.ValidAttachments {
		valid[key(a.ContainerId, a.Ifname)] = true
	}
	entries, lerr := s.store.Load()
	if errors.Is(lerr, formatversion.ErrNewer) {
		// A pod of a newer entry would look unknown and be torn down.
		return nil, cniError(cnirpc.ErrorCode_TRY_AGAIN_LATER, "", "garbage collection: %v", lerr)
	}
	if lerr != nil {
		s.log.Error(lerr, "some checkpoint entries cannot be read")
	}
	known := map[string]bool{}
	var errs []error
	for _, e := range entries {
		k := key(e.ContainerID, e.IfName)
		known[k] = true
		if valid[k] {
			continue
		}
		unlock, ok := s.keys.tryLock(k)
		if !ok {
			continue
		}
		// Read again under the lock: a DEL may have come first.
		cur, found, err := s.store.Get(e.ContainerID, e.IfName)
		if err == nil && found {
			err = s.release(ctx, cur, true, "")
			if err == nil {
				s.log.Info("collected pod interface the runtime no longer knows", "containerID", e.ContainerID, "ifname", e.IfName)
			}
		}
		unlock()
		if err != nil {
			errs = append(errs, err)
		}
	}
	// Dataplane leftovers with neither a checkpoint nor a runtime record.
	pods, err := s.dp.ListPods(ctx)
	if err != nil {
		errs = append(errs, err)
	}
	for _, p := range pods {
		k := key(p.ContainerID, p.IfName)
		if valid[k] || known[k] {
			continue
		}
		unlock, ok := s.keys.tryLock(k)
		if !ok {
			continue
		}
		if _, found, _ := s.store.Get(p.ContainerID, p.IfName); !found {
			if err := s.dp.TeardownPod(ctx, p); err != nil {
				errs = append(errs, err)
			}
		}
		unlock()
	}
	if len(errs) > 0 {
		return nil, cniError(cnirpc.ErrorCode_TRY_AGAIN_LATER, "", "garbage collection: %v", errors.Join(errs...))
	}
	return &cnirpc.Empty{}, nil
}

// dataplaneCode is the CNI code of a dataplane error: try again later when
// the dataplane could not act now, internal otherwise.
func dataplaneCode(err error) cnirpc.ErrorCode {
	if errors.Is(err, dataplane.ErrNotReady) {
		return cnirpc.ErrorCode_TRY_AGAIN_LATER
	}
	return cnirpc.ErrorCode_INTERNAL
}

// CNI_ARGS keys of Kubernetes runtimes.
const (
	argPodNamespace = "K8S_POD_NAMESPACE"
	argPodName      = "K8S_POD_NAME"
)

func validateArgs(args *cnirpc.CNIArgs, needNetns bool) error {
	switch {
	case args.ContainerId == "":
		return cniError(cnirpc.ErrorCode_INVALID_ENVIRONMENT_VARIABLES, "", "CNI_CONTAINERID is empty")
	case args.Ifname == "":
		return cniError(cnirpc.ErrorCode_INVALID_ENVIRONMENT_VARIABLES, "", "CNI_IFNAME is empty")
	case needNetns && args.Netns == "":
		return cniError(cnirpc.ErrorCode_INVALID_ENVIRONMENT_VARIABLES, "", "CNI_NETNS is empty")
	}
	return nil
}

// validateKey checks the container ID and interface name as the CNI
// library's skel does for the vcoil binary, for clients that talk to the
// socket directly: a dataplane builds names and tags from them, so a key it
// cannot wire must be refused before an address is taken, or the undo and
// every DEL would fail on the same key and the address would leak.
func validateKey(args *cnirpc.CNIArgs) error {
	k := dataplane.PodKey{ContainerID: args.ContainerId, IfName: args.Ifname}
	err := k.Validate()
	if err == nil {
		return nil
	}
	field := "CNI_IFNAME"
	if (dataplane.PodKey{ContainerID: k.ContainerID, IfName: "eth0"}).Validate() != nil {
		field = "CNI_CONTAINERID"
	}
	return cniError(cnirpc.ErrorCode_INVALID_ENVIRONMENT_VARIABLES, "", "%s: %v", field, err)
}

// poolOf reads the pool from the namespace's vcoil.io/pool annotation.
func (s *Server) poolOf(ctx context.Context, namespace string) (string, error) {
	if namespace == "" {
		return vcoilv2.DefaultPool, nil
	}
	ns := &corev1.Namespace{}
	if err := s.namespaces.Get(ctx, client.ObjectKey{Name: namespace}, ns); err != nil {
		if apierrors.IsNotFound(err) {
			return vcoilv2.DefaultPool, nil
		}
		return "", cniError(cnirpc.ErrorCode_TRY_AGAIN_LATER, "", "read namespace %q: %v", namespace, err)
	}
	if p := ns.Annotations[vcoilv2.AnnotationPool]; p != "" {
		return p, nil
	}
	return vcoilv2.DefaultPool, nil
}

func allocationError(pool, namespace string, err error) error {
	from := "the default pool"
	if pool != vcoilv2.DefaultPool {
		from = fmt.Sprintf("the pool named by annotation %s of namespace %q", vcoilv2.AnnotationPool, namespace)
	}
	switch {
	case errors.Is(err, nodeipam.ErrPoolNotFound):
		return cniError(cnirpc.ErrorCode_POOL_NOT_FOUND, err.Error(), "address pool %q (%s) does not exist", pool, from)
	case errors.Is(err, nodeipam.ErrPoolExhausted):
		return cniError(cnirpc.ErrorCode_POOL_EXHAUSTED, err.Error(), "address pool %q (%s) has no free block", pool, from)
	case errors.Is(err, nodeipam.ErrPoolDeleting):
		return cniError(cnirpc.ErrorCode_POOL_NOT_FOUND, err.Error(), "address pool %q (%s) is being deleted", pool, from)
	case errors.Is(err, nodeipam.ErrPoolNotForPods):
		// There is no pod pool of that name: the same code as a missing one.
		return cniError(cnirpc.ErrorCode_POOL_NOT_FOUND, err.Error(), "address pool %q (%s) serves LoadBalancer addresses, not pods", pool, from)
	case errors.Is(err, nodeipam.ErrTimeout), errors.Is(err, nodeipam.ErrNotReady), errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return cniError(cnirpc.ErrorCode_TRY_AGAIN_LATER, err.Error(), "no address from pool %q yet", pool)
	}
	return cniError(cnirpc.ErrorCode_INTERNAL, err.Error(), "allocate an address from pool %q: %v", pool, err)
}

func (s *Server) freeOrLog(ctx context.Context, log logr.Logger, a ipam.Allocation) {
	if err := s.ipam.Free(ctx, a); err != nil {
		log.Error(err, "could not free the address", "block", a.Block)
	}
}

func podOf(e checkpoint.Entry) dataplane.Pod {
	return dataplane.Pod{
		PodKey:    dataplane.PodKey{ContainerID: e.ContainerID, IfName: e.IfName},
		Netns:     e.Netns,
		Namespace: e.Namespace, Name: e.Name,
		IPv4: e.IPv4, IPv6: e.IPv6, MTU: e.MTU,
		PortMappings:      dataplaneMappings(e.PortMappings),
		SourcePrefixes:    e.SourcePrefixes,
		NoChecksumOffload: e.NoChecksumOffload,
	}
}

// checkpointMappings and dataplaneMappings convert hostPorts between the
// checkpoint's record and the dataplane's (nil for none, so that an entry
// without hostPorts is written without the field).
func checkpointMappings(ms []dataplane.PortMapping) []checkpoint.PortMapping {
	if len(ms) == 0 {
		return nil
	}
	out := make([]checkpoint.PortMapping, len(ms))
	for i, m := range ms {
		out[i] = checkpoint.PortMapping{HostIP: m.HostIP, HostPort: m.HostPort, ContainerPort: m.ContainerPort, Protocol: m.Protocol}
	}
	return out
}

func dataplaneMappings(ms []checkpoint.PortMapping) []dataplane.PortMapping {
	if len(ms) == 0 {
		return nil
	}
	out := make([]dataplane.PortMapping, len(ms))
	for i, m := range ms {
		out[i] = dataplane.PortMapping{HostIP: m.HostIP, HostPort: m.HostPort, ContainerPort: m.ContainerPort, Protocol: m.Protocol}
	}
	return out
}

func allocationOf(e checkpoint.Entry) ipam.Allocation {
	return ipam.Allocation{Pool: e.Pool, Block: e.Block, Offset: e.Offset, IPv4: e.IPv4, IPv6: e.IPv6}
}

func podRef(args *cnirpc.CNIArgs) string {
	if ns, name := args.Args[argPodNamespace], args.Args[argPodName]; name != "" {
		return ns + "/" + name
	}
	return ""
}

func addrString(a netip.Addr) string {
	if !a.IsValid() {
		return ""
	}
	return a.String()
}

// buildResult encodes the CNI result in its newest version; the vcoil binary
// converts it to the version the runtime asked for.
func buildResult(args *cnirpc.CNIArgs, e checkpoint.Entry, ifs dataplane.Interfaces) ([]byte, error) {
	r := &current.Result{
		CNIVersion: "1.1.0",
		Interfaces: []*current.Interface{
			{Name: ifs.HostIfName, Mac: ifs.HostMAC},
			{Name: args.Ifname, Mac: ifs.PodMAC, Sandbox: args.Netns, Mtu: ifs.MTU},
		},
	}
	podIf := 1
	if e.IPv4.IsValid() {
		r.IPs = append(r.IPs, &current.IPConfig{Interface: &podIf, Address: net.IPNet{IP: e.IPv4.AsSlice(), Mask: net.CIDRMask(32, 32)}})
	}
	if e.IPv6.IsValid() {
		r.IPs = append(r.IPs, &current.IPConfig{Interface: &podIf, Address: net.IPNet{IP: e.IPv6.AsSlice(), Mask: net.CIDRMask(128, 128)}})
	}
	return json.Marshal(r)
}
