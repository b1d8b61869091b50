package v2

// Names shared by every vcoil program and by users' manifests.
const (
	// LabelPool is set on an AddressBlock to the name of its AddressPool.
	LabelPool = "vcoil.io/pool"
	// LabelNode is set on an AddressBlock to the name of the Node that owns it.
	LabelNode = "vcoil.io/node"
	// LabelRequest is set on an AddressBlock to the UID of the BlockRequest it was
	// carved for. It lets the controller recognise its own block after a restart
	// or a conflict, so that one request never gets two blocks.
	LabelRequest = "vcoil.io/request"
	// LabelServiceProxy set to "disabled" on a Node keeps vcoild from
	// serving Services there (for a node-by-node migration from kube-proxy);
	// vcoild reads it at start.
	LabelServiceProxy = "vcoil.io/service-proxy"

	// Finalizer guards AddressPools (while blocks exist) and AddressBlocks (while
	// addresses of the block are in use on the node).
	Finalizer = "vcoil.io/finalizer"

	// AnnotationPool on a Namespace names the AddressPool for its pods.
	AnnotationPool = "vcoil.io/pool"
	// AnnotationNATLoopback on a Node holds the node's NAT loopback address(es),
	// comma separated, published by vcoild for the service renderers.
	AnnotationNATLoopback = "vcoil.io/nat-loopback"

	// AnnotationAllowedSourcePrefixes on a Pod lists prefixes, comma
	// separated, that the pod may use as source addresses besides its own
	// (a router, a VPN gateway). Source validation drops every other
	// source. vcoild reads it at CNI ADD; admission makes it immutable and
	// refuses it unless every prefix lies inside the pod's Namespace's
	// AnnotationPermittedSourcePrefixes.
	AnnotationAllowedSourcePrefixes = "vcoil.io/allowed-source-prefixes"
	// AnnotationPermittedSourcePrefixes on a Namespace is the cluster
	// administrator's grant: the prefixes, comma separated, that pods of the
	// namespace may list in AnnotationAllowedSourcePrefixes. Namespaces are
	// cluster-scoped, so only those allowed to update Namespaces can grant it.
	AnnotationPermittedSourcePrefixes = "vcoil.io/permitted-source-prefixes"

	// AnnotationChecksumOffload on a Pod set to "off" makes the pod's
	// interface complete every checksum it sends instead of leaving it to
	// offload ("on", the default, or absent: offload). It is for pods that
	// tunnel or forward packets on VPP nodes: VPP completes the outer
	// checksum of a packet whose checksum a pod left to offload, never the
	// inner one of a tunnelled packet, which its receiver then drops.
	// vcoild chooses "off" by itself for Egress routers (LabelEgress) and
	// Egress clients (AnnotationEgressPrefix). The Linux dataplane needs no
	// such choice and ignores it. vcoild reads it at the pod's first CNI
	// ADD; later changes take effect when the pod is made again.
	AnnotationChecksumOffload = "vcoil.io/checksum-offload"

	// LoadBalancerClass is the spec.loadBalancerClass vcoil serves; Services
	// without a class are served too unless vcoil-controller runs with
	// --lb-class-only.
	LoadBalancerClass = "vcoil.io/lb"
	// AnnotationLBPool on a Service names the LoadBalancer AddressPool its
	// addresses come from (default: DefaultLBPool).
	AnnotationLBPool = "vcoil.io/lb-pool"
	// AnnotationLBIPs on a Service requests its LoadBalancer addresses, at
	// most one per family, comma separated (spec.loadBalancerIP, deprecated
	// upstream, is honoured too).
	AnnotationLBIPs = "vcoil.io/lb-ips"
	// DefaultLBPool is the LoadBalancer pool used when a Service names
	// none (vcoil-controller --default-lb-pool changes it).
	DefaultLBPool = "default-lb"

	// AnnotationEgressPrefix starts the annotation that makes a pod a client
	// of Egresses: egress.vcoil.io/<egress namespace> set to the names of
	// Egresses of that namespace, comma separated.
	AnnotationEgressPrefix = "egress.vcoil.io/"
	// LabelEgress on an Egress's Deployment, pods, Service and
	// PodDisruptionBudget holds the Egress's name.
	LabelEgress = "vcoil.io/egress"
	// EgressContainer is the name of vcoil's container in router pods.
	EgressContainer = "egress"
	// EgressFoUPort and EgressVXLANPort are the UDP ports router pods and
	// client pods receive tunnelled packets on, and the ports of an
	// Egress's Service.
	EgressFoUPort   = 5555
	EgressVXLANPort = 4789

	// DefaultPool is the pool used when a namespace names none. Its first block
	// on a node is the node's node subnet.
	DefaultPool = "default"

	// DefaultBlockSizeBits is the default AddressPool.spec.blockSizeBits: blocks
	// of 32 addresses.
	DefaultBlockSizeBits = 5
)
