package scale

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vcoil/vcoil/v2/e2e/lab/bench"
)

// kernelWatch tells when an address first appears in an element added to
// any nftables set or map of a node, from the kernel's own notifications.
// `nft monitor` (which the services benchmark's monitor ran before it
// decoded the notices itself) prints every event as text and fell minutes
// behind at this size (30,000 pods' policy sets and the churn): here the
// raw NEWSETELEM messages are searched for the address's four bytes,
// which a key (a policy set's address) or a value (a DNAT map's endpoint)
// holds as they are.
type kernelWatch struct {
	fd      int
	mu      sync.Mutex
	waiters map[netip.Addr]chan time.Time
	// lost counts the times the socket overflowed (events dropped).
	lost atomic.Int64
	done chan struct{}
	err  error
}

// startKernelWatch listens in the network namespace at nsPath until ctx
// ends.
func startKernelWatch(ctx context.Context, nsPath string) (*kernelWatch, error) {
	fd, err := bench.NFTablesSocket(nsPath)
	if err != nil {
		return nil, err
	}
	k := &kernelWatch{fd: fd, waiters: map[netip.Addr]chan time.Time{}, done: make(chan struct{})}
	go k.read(ctx)
	return k, nil
}

func (k *kernelWatch) read(ctx context.Context) {
	defer close(k.done)
	defer unix.Close(k.fd)
	k.err = bench.ReadNotices(ctx, k.fd, &k.lost, func(now time.Time, msgs []syscall.NetlinkMessage) {
		k.mu.Lock()
		defer k.mu.Unlock()
		for _, m := range msgs {
			if m.Header.Type != bench.NFNLSubsysNFTables<<8|bench.NFTMsgNewSetElem {
				continue
			}
			for a, ch := range k.waiters {
				b := a.As4()
				if bytes.Contains(m.Data, b[:]) {
					ch <- now
					delete(k.waiters, a)
				}
			}
		}
	})
}

// Expect registers an address before the change that brings it; the
// returned function waits for the first element naming it.
func (k *kernelWatch) Expect(a netip.Addr) func(ctx context.Context) (time.Time, error) {
	ch := make(chan time.Time, 1)
	k.mu.Lock()
	k.waiters[a] = ch
	k.mu.Unlock()
	return func(ctx context.Context) (time.Time, error) {
		select {
		case at := <-ch:
			return at, nil
		case <-k.done:
			return time.Time{}, fmt.Errorf("kernel watch stopped before %s showed: %v", a, k.err)
		case <-ctx.Done():
			k.mu.Lock()
			delete(k.waiters, a)
			k.mu.Unlock()
			return time.Time{}, fmt.Errorf("%s not in the kernel (%d overflows of the watch): %w", a, k.lost.Load(), ctx.Err())
		}
	}
}
