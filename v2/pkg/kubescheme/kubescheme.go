// Package kubescheme builds the runtime.Scheme of vcoil's programs and
// tests: the built-in Kubernetes types and vcoil.io/v2, plus what a caller
// adds (the lab adds apiextensions to install CRDs).
package kubescheme

import (
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	vcoilv2 "github.com/vcoil/vcoil/v2/api/v2"
)

// New returns a scheme with the built-in types, vcoil's and extra.
func New(extra ...func(*runtime.Scheme) error) (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	for _, add := range append([]func(*runtime.Scheme) error{clientgoscheme.AddToScheme, vcoilv2.AddToScheme}, extra...) {
		if err := add(s); err != nil {
			return nil, fmt.Errorf("build the scheme: %w", err)
		}
	}
	return s, nil
}
