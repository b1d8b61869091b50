// Package kubescheme builds the runtime.Scheme of vcoil's programs and
// tests: the built-in Kubernetes types, vcoil.io/v2 and the
// ClusterNetworkPolicy API of SIG Network (policy.networking.k8s.io, v1beta1
// and v1alpha2, from sigs.k8s.io/network-policy-api), plus what a caller
// adds (the lab adds apiextensions to install CRDs).
package kubescheme

import (
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	cnpv1alpha2 "sigs.k8s.io/network-policy-api/apis/v1alpha2"
	cnpv1beta1 "sigs.k8s.io/network-policy-api/apis/v1beta1"

	vcoilv2 "github.com/vcoil/vcoil/v2/api/v2"
)

// New returns a scheme with the built-in types, vcoil's, the
// ClusterNetworkPolicy API's and extra.
func New(extra ...func(*runtime.Scheme) error) (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	for _, add := range append([]func(*runtime.Scheme) error{clientgoscheme.AddToScheme, vcoilv2.AddToScheme, cnpv1beta1.AddToScheme, cnpv1alpha2.AddToScheme}, extra...) {
		if err := add(s); err != nil {
			return nil, fmt.Errorf("build the scheme: %w", err)
		}
	}
	return s, nil
}
