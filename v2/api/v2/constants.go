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

	// DefaultPool is the pool used when a namespace names none. Its first block
	// on a node is the node's node subnet.
	DefaultPool = "default"

	// DefaultBlockSizeBits is the default AddressPool.spec.blockSizeBits: blocks
	// of 32 addresses.
	DefaultBlockSizeBits = 5
)
