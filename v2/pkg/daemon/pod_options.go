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

// podOptions are what vcoild takes from the pod's object at its first
// ADD and keeps in the checkpoint.
type podOptions struct {
	sourcePrefixes    []netip.Prefix
	noChecksumOffload bool
}

// podOptionsOf reads the pod of args, once, at its first ADD: its
// allowed-source-prefixes annotation (admission makes it immutable) and its
// checksum choice (the checksum-offload annotation, else "off" for Egress
// routers and clients); the checkpoint keeps what was read for every later
// wiring. A pod the apiserver does not hold (any more, or not under the
// runtime's UID) gets neither: source validation then allows its own
// addresses only. A pod that cannot be read fails the ADD (try again
// later) rather than being wired without the prefixes it was admitted
// with, which it would never get afterwards.
func (s *Server) podOptionsOf(ctx context.Context, args *cnirpc.CNIArgs) (podOptions, error) {
	namespace, name := args.Args[argPodNamespace], args.Args[argPodName]
	if s.pods == nil || name == "" {
		return podOptions{}, nil
	}
	pod := s.cachedPod(ctx, namespace, name, args.Args[argPodUID])
	if pod == nil {
		pod = &corev1.Pod{}
		if err := s.pods.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, pod); err != nil {
			if apierrors.IsNotFound(err) {
				return podOptions{}, nil
			}
			return podOptions{}, cniError(cnirpc.ErrorCode_TRY_AGAIN_LATER, "", "read pod %s/%s for its annotations %s and %s: %v", namespace, name, vcoilv2.AnnotationAllowedSourcePrefixes, vcoilv2.AnnotationChecksumOffload, err)
		}
	}
	if uid := args.Args[argPodUID]; uid != "" && string(pod.UID) != uid {
		// Another pod of the same name: its annotations are not this sandbox's.
		return podOptions{}, nil
	}
	prefixes, err := parseSourcePrefixes(pod.Annotations[vcoilv2.AnnotationAllowedSourcePrefixes])
	if err != nil {
		return podOptions{}, cniError(cnirpc.ErrorCode_INVALID_NETWORK_CONFIG, "", "annotation %s of pod %s/%s: %v", vcoilv2.AnnotationAllowedSourcePrefixes, namespace, name, err)
	}
	noOffload, err := noChecksumOffload(pod)
	if err != nil {
		return podOptions{}, cniError(cnirpc.ErrorCode_INVALID_NETWORK_CONFIG, "", "annotation %s of pod %s/%s: %v", vcoilv2.AnnotationChecksumOffload, namespace, name, err)
	}
	return podOptions{sourcePrefixes: prefixes, noChecksumOffload: noOffload}, nil
}

// cachedPod is the pod from the node's pod cache when the cache holds it
// under uid, else nil. Without a UID from the runtime the cache is not
// asked: a pod deleted and made again under the same name would pass for
// the new one until the watch brings the change. The allowed source
// prefixes are immutable once admitted, so the cached pod of the right
// UID carries exactly the apiserver's.
func (s *Server) cachedPod(ctx context.Context, namespace, name, uid string) *corev1.Pod {
	if s.podCache == nil || uid == "" {
		return nil
	}
	pod := &corev1.Pod{}
	if err := s.podCache.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, pod); err != nil || string(pod.UID) != uid {
		return nil
	}
	return pod
}

// noChecksumOffload is the pod's checksum choice: its checksum-offload
// annotation when it has one, else true for the pods vcoil knows tunnel:
// an Egress's routers (labelled with the Egress) and its clients
// (annotated with the Egresses they use).
func noChecksumOffload(pod *corev1.Pod) (bool, error) {
	if v, ok := pod.Annotations[vcoilv2.AnnotationChecksumOffload]; ok {
		switch strings.TrimSpace(v) {
		case "on":
			return false, nil
		case "off":
			return true, nil
		}
		return false, fmt.Errorf("%q: want \"on\" or \"off\"", v)
	}
	if _, ok := pod.Labels[vcoilv2.LabelEgress]; ok {
		return true, nil
	}
	for k := range pod.Annotations {
		if strings.HasPrefix(k, vcoilv2.AnnotationEgressPrefix) {
			return true, nil
		}
	}
	return false, nil
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
