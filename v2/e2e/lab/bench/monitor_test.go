package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vcoil/vcoil/v2/internal/netnstest"
	"github.com/vcoil/vcoil/v2/internal/poll"
)

func TestBenchAddrsFindsEndpointAddressesInKubeProxysAndVcoilsForms(t *testing.T) {
	for _, tc := range []struct {
		line string
		want []string
	}{
		{"add chain ip kube-proxy endpoint-5OJB2KTY-vcoil-bench/b-00001/http__10.200.0.11/8080", []string{"10.200.0.11"}},
		{"add rule ip kube-proxy endpoint-X ip saddr 10.200.0.11 jump mark-for-masquerade", []string{"10.200.0.11"}},
		{"add element inet vcoil-services backends4 { 10.96.0.16 . tcp . 80 . 3 : 10.200.0.4 . 8080 }", []string{"10.200.0.4"}},
		{"add rule ip kube-proxy x meta l4proto tcp dnat to 10.204.0.1:8080", []string{"10.204.0.1"}},
		{"not in range: 110.200.0.1 10.208.0.1 10.96.0.16 # new generation 10.20", nil},
	} {
		var got []string
		for _, a := range benchAddrs(tc.line) {
			got = append(got, a.String())
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%q: %v, want %v", tc.line, got, tc.want)
		}
	}
}

// The monitor reads real nft output: a transaction of many elements is
// counted whole and dated by the kernel's notice of its commit (not by
// when nft printed it); an address added later is seen by who expects it,
// dated the same way.
func TestMonitorCountsATransactionAndSeesOneChange(t *testing.T) {
	ns := netnstest.New(t, "bench")
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	m, err := StartMonitor(ctx, ns.Path())
	if err != nil {
		t.Fatal(err)
	}
	// nft monitor subscribes a moment after it starts: a table made until
	// it shows tells that it listens.
	k := 0
	if err := poll.Until(ctx, 30*time.Second, 100*time.Millisecond, func(ctx context.Context) error {
		k++
		if _, err := ns.TryExec(ctx, "nft", fmt.Sprintf("add table inet probe%d; add set inet probe%d s { type ipv4_addr; elements = { %s } }", k, k, ChangeAddr(MaxChanges-2))); err != nil {
			return err
		}
		if m.Count() == 0 {
			return errors.New("nft monitor has not shown a probe yet")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	m.Reset()
	const n = 2000
	var elems []string
	for i := range n / EndpointsPerService {
		for j := range EndpointsPerService {
			elems = append(elems, EndpointAddr(i, j).String()+" . 8080")
		}
	}
	file := filepath.Join(t.TempDir(), "rules.nft")
	rules := "table inet bench {\n map m { type ipv4_addr . inet_service : verdict; }\n chain c {}\n}\nadd element inet bench m { " +
		strings.Join(elems, " : goto c, ") + " : goto c }\n"
	if err := os.WriteFile(file, []byte(rules), 0o644); err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	ns.Exec("nft", "-f", file)
	after := time.Now()
	at, err := m.WaitCount(ctx, n)
	if err != nil {
		t.Fatal(err)
	}
	// The notice is dated when the clock read it: on a loaded machine its
	// reader may run a moment after nft has returned.
	if at.Before(before) || at.After(after.Add(time.Second)) {
		t.Errorf("the transaction is dated %s, outside the nft run %s..%s", at.Format(time.StampMicro), before.Format(time.StampMicro), after.Format(time.StampMicro))
	}
	m.mu.Lock()
	s := m.seen[EndpointAddr(0, 0)]
	m.mu.Unlock()
	if !s.kernel || !s.txn.Equal(at) {
		t.Errorf("the transaction's first address: %+v, want dated by the kernel's notice at %s", s, at.Format(time.StampMicro))
	}

	wait := m.Expect(ChangeAddr(0))
	start := time.Now()
	ns.Exec("nft", "add", "element", "inet", "bench", "m", "{ "+ChangeAddr(0).String()+" . 8080 : goto c }")
	seen, err := wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if seen.Before(start) || seen.Sub(start) > 5*time.Second {
		t.Errorf("the change was seen at %s, %s after it was made", seen.Format(time.StampMicro), seen.Sub(start))
	}
	if lost := m.clock.Lost(); lost > 0 {
		t.Errorf("the clock's socket overflowed %d times", lost)
	}
}
