package suite

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

const groupServiceProxy = "Service proxy"

// vcoild's service renderer runs the nft binary (through knftables): the
// image must carry it with its libraries, whatever the node has.
func TestVcoildImageRunsNft(t *testing.T) {
	k := need(t)
	record(t, groupServiceProxy, "vcoild's image runs nft (its libraries and loader inside)", byVcoil, func(t *testing.T) error {
		c := ctx(t, time.Minute)
		var pods corev1.PodList
		if err := k.c.List(c, &pods, client.MatchingLabels{"app.kubernetes.io/name": "vcoild"}); err != nil {
			return err
		}
		n := 0
		for i := range pods.Items {
			p := &pods.Items[i]
			if p.Status.Phase != corev1.PodRunning {
				continue
			}
			out, err := k.exec(c, p, "nft", "--version")
			if err != nil {
				return err
			}
			if !strings.HasPrefix(out, "nftables v") {
				return fmt.Errorf("nft --version in %s/%s says %q", p.Namespace, p.Name, out)
			}
			n++
		}
		if n == 0 {
			return fmt.Errorf("no running vcoild pod")
		}
		return nil
	})
}
