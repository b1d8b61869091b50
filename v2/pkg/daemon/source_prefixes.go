package daemon

import (
	"context"
	"fmt"
	"net/netip"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vcoilv2 "github.com/vcoil/vcoil/v2/api/v2"
	"github.com/vcoil/vcoil/v2/pkg/cnirpc"
	"github.com/vcoil/vcoil/v2/pkg/dataplane"
)

// sourcePrefixesOf reads the pod of args for its allowed-source-prefixes
// annotation, once, at its first ADD: admission makes the annotation
// immutable, and the checkpoint keeps what was read for every later
// wiring. A pod the apiserver does not hold (any more, or not under the
// runtime's UID) gets none: source validation then allows its own
// addresses only. A pod that cannot be read fails the ADD (try again
// later) rather than being wired without the prefixes it was admitted
// with, which it would never get afterwards.
func (s *Server) sourcePrefixesOf(ctx context.Context, args *cnirpc.CNIArgs) ([]netip.Prefix, error) {
	namespace, name := args.Args[argPodNamespace], args.Args[argPodName]
	if s.pods == nil || name == "" {
		return nil, nil
	}
	pod := &corev1.Pod{}
	if err := s.pods.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, pod); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, cniError(cnirpc.ErrorCode_TRY_AGAIN_LATER, "", "read pod %s/%s for its annotation %s: %v", namespace, name, vcoilv2.AnnotationAllowedSourcePrefixes, err)
	}
	if uid := args.Args[argPodUID]; uid != "" && string(pod.UID) != uid {
		// Another pod of the same name: its annotation is not this sandbox's.
		return nil, nil
	}
	prefixes, err := parseSourcePrefixes(pod.Annotations[vcoilv2.AnnotationAllowedSourcePrefixes])
	if err != nil {
		return nil, cniError(cnirpc.ErrorCode_INVALID_NETWORK_CONFIG, "", "annotation %s of pod %s/%s: %v", vcoilv2.AnnotationAllowedSourcePrefixes, namespace, name, err)
	}
	return prefixes, nil
}

// parseSourcePrefixes parses the annotation's comma separated prefixes
// (spaces around each allowed). A prefix with host bits set, an IPv4-mapped
// IPv6 prefix, an empty element or a prefix no pod may send from is refused: what the pod may send from
// must be exactly what was admitted, never a guess at what was meant.
func parseSourcePrefixes(v string) ([]netip.Prefix, error) {
	if strings.TrimSpace(v) == "" {
		return nil, nil
	}
	var out []netip.Prefix
	for i, f := range strings.Split(v, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			return nil, fmt.Errorf("element %d is empty", i)
		}
		p, err := netip.ParsePrefix(f)
		switch {
		case err != nil:
			return nil, fmt.Errorf("%q is not a prefix (address/length)", f)
		case p.Addr().Is4In6():
			return nil, fmt.Errorf("%q is an IPv4-mapped IPv6 prefix: write the IPv4 prefix", f)
		case p != p.Masked():
			return nil, fmt.Errorf("%q has host bits set: want %s", f, p.Masked())
		}
		// What no dataplane would wire (0.0.0.0/0, loopback, link-local)
		// is refused here, before an address is allocated for nothing.
		if err := dataplane.ValidateSourcePrefix(p); err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}
