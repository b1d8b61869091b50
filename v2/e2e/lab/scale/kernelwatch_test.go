package scale

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/vcoil/vcoil/v2/internal/netnstest"
)

// The watch sees an address arrive in a set's key and in a map's value,
// in the namespace it listens in, and only when it arrives.
func TestKernelWatchSeesAddressesInElements(t *testing.T) {
	netnstest.RequireRoot(t)
	n := netnstest.New(t, "kwatch")
	n.Exec("nft", "add table inet w; add set inet w peers { type ipv4_addr; flags interval; }; add map inet w be { type ipv4_addr . inet_service : ipv4_addr . inet_service; }")
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	k, err := startKernelWatch(ctx, n.Path())
	if err != nil {
		t.Fatal(err)
	}
	key, value, never := netip.MustParseAddr("198.51.100.7"), netip.MustParseAddr("203.0.113.9"), netip.MustParseAddr("198.51.100.99")
	waitKey, waitValue, waitNever := k.Expect(key), k.Expect(value), k.Expect(never)
	before := time.Now()
	n.Exec("nft", "add element inet w peers { 198.51.100.7 }")
	n.Exec("nft", "add element inet w be { 198.51.100.1 . 80 : 203.0.113.9 . 8080 }")
	for name, wait := range map[string]func(context.Context) (time.Time, error){"set key": waitKey, "map value": waitValue} {
		wctx, c := context.WithTimeout(ctx, 5*time.Second)
		at, err := wait(wctx)
		c()
		if err != nil || at.Before(before) {
			t.Errorf("%s: %v at %v (change at %v)", name, err, at, before)
		}
	}
	wctx, c := context.WithTimeout(ctx, 300*time.Millisecond)
	defer c()
	if at, err := waitNever(wctx); err == nil {
		t.Errorf("an address no element holds was seen at %v", at)
	}
}
