package kubescheme

import (
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"

	cnpv1alpha2 "sigs.k8s.io/network-policy-api/apis/v1alpha2"
	cnpv1beta1 "sigs.k8s.io/network-policy-api/apis/v1beta1"

	vcoilv2 "github.com/vcoil/vcoil/v2/api/v2"
)

func TestNewKnowsBuiltInVcoilAndExtraTypes(t *testing.T) {
	s, err := New(apiextensionsv1.AddToScheme)
	if err != nil {
		t.Fatal(err)
	}
	for _, obj := range []runtime.Object{&corev1.Node{}, &vcoilv2.AddressPool{}, &vcoilv2.BlockRequest{}, &apiextensionsv1.CustomResourceDefinition{},
		&cnpv1beta1.ClusterNetworkPolicy{}, &cnpv1alpha2.ClusterNetworkPolicy{}} {
		if _, _, err := s.ObjectKinds(obj); err != nil {
			t.Errorf("%T: %v", obj, err)
		}
	}
	plain, err := New()
	if err != nil {
		t.Fatal(err)
	}
	if plain.Recognizes(apiextensionsv1.SchemeGroupVersion.WithKind("CustomResourceDefinition")) {
		t.Error("apiextensions is registered without being asked for")
	}
	boom := errors.New("boom")
	if _, err := New(func(*runtime.Scheme) error { return boom }); !errors.Is(err, boom) {
		t.Errorf("New with a failing AddToScheme = %v, want it wrapped", err)
	}
}
