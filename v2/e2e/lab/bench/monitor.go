package bench

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Monitor watches what a proxy writes into the kernel, the same way for
// both proxies: it decodes the kernel's own nftables notices in the node's
// network namespace and notes, for every benchmark endpoint address, when
// the transaction that first brought it was committed. The kernel sends a
// transaction's notices when it commits it, then a new generation's
// (NEWGEN); an address counts once the NEWGEN that ends its transaction
// is read, and is dated by the time it was read, so that a proxy that
// writes its table in a hundred transactions (vcoil's, over netlink) is
// charged for each as it commits.
//
// The notices are decoded in the monitor's process, one socket per
// monitor: `nft monitor`, which this replaces, printed 100,000 elements as
// text during a full sync and took the CPU of the two-core lab from the
// proxy being measured.
//
// It recognises addresses only (appendNoticeAddrs), not the proxy's rule
// forms, so that the same reading serves kube-proxy's rules and vcoil's
// map elements.
type Monitor struct {
	// lost counts the socket's overflows: every notice the kernel dropped
	// may be an address missed or a transaction's end.
	lost atomic.Int64

	mu sync.Mutex
	// seen holds the addresses of EndpointRange seen since the last Reset,
	// with the time their transaction was committed.
	seen map[netip.Addr]time.Time
	// cur are the addresses the current transaction brought so far: they
	// count once it is committed.
	cur []netip.Addr
	// waiters are woken when an address they wait for shows.
	waiters map[netip.Addr]chan time.Time
	// err is why the monitor stopped reading.
	err  error
	done chan struct{}
}

// StartMonitor reads the nftables notices of the network namespace at
// netnsPath until ctx ends. It listens when it returns: a change made
// after is seen.
func StartMonitor(ctx context.Context, netnsPath string) (*Monitor, error) {
	fd, err := NFTablesSocket(netnsPath)
	if err != nil {
		return nil, err
	}
	m := newMonitor()
	go func() {
		err := ReadNotices(ctx, fd, &m.lost, m.notices)
		unix.Close(fd)
		if err == nil {
			err = ctx.Err()
		}
		m.stop(fmt.Errorf("nftables notices in %s: %w", netnsPath, err))
	}()
	return m, nil
}

// newMonitor is a monitor fed by notices (StartMonitor feeds it from a
// socket).
func newMonitor() *Monitor {
	return &Monitor{seen: map[netip.Addr]time.Time{}, waiters: map[netip.Addr]chan time.Time{}, done: make(chan struct{})}
}

func (m *Monitor) stop(err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.err = err
	close(m.done)
}

// notices takes one datagram's messages, read at now.
func (m *Monitor) notices(now time.Time, msgs []syscall.NetlinkMessage) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, msg := range msgs {
		if msg.Header.Type == NFNLSubsysNFTables<<8|nftMsgNewGen {
			m.commit(now)
			continue
		}
		m.cur = appendNoticeAddrs(m.cur, msg)
	}
}

// commit ends the current transaction: its addresses not seen yet count,
// committed at now. A NEWGEN lost to an overflow leaves its transaction's
// addresses to the next one, dated later.
func (m *Monitor) commit(now time.Time) {
	for _, a := range m.cur {
		if _, ok := m.seen[a]; ok {
			continue
		}
		m.seen[a] = now
		if w, ok := m.waiters[a]; ok {
			w <- now
			delete(m.waiters, a)
		}
	}
	m.cur = m.cur[:0]
}

// Reset forgets the addresses seen so far: what comes after is counted.
func (m *Monitor) Reset() {
	m.mu.Lock()
	defer m.mu.Unlock()
	// Cleared, not replaced: the next full sync fills as many.
	clear(m.seen)
}

// Count is how many distinct benchmark addresses were seen since Reset.
func (m *Monitor) Count() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.seen)
}

// Lost is how many times the monitor's socket overflowed.
func (m *Monitor) Lost() int64 { return m.lost.Load() }

// WaitCount waits until want distinct addresses were seen since Reset and
// returns when the last transaction that brought one of them was
// committed; on timeout it returns how many it saw.
func (m *Monitor) WaitCount(ctx context.Context, want int) (time.Time, error) {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		m.mu.Lock()
		n, err := len(m.seen), m.err
		var last time.Time
		if n >= want {
			for _, at := range m.seen {
				if at.After(last) {
					last = at
				}
			}
		}
		m.mu.Unlock()
		if n >= want {
			return last, nil
		}
		select {
		case <-m.done:
			return time.Time{}, fmt.Errorf("monitor stopped after %d of %d addresses (%d overflows of its socket): %w", n, want, m.Lost(), err)
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("%d of %d addresses in the kernel (%d overflows of the monitor's socket): %w", n, want, m.Lost(), ctx.Err())
		case <-tick.C:
		}
	}
}

// Expect registers an address before the change that brings it; the
// returned function waits for it and returns when its transaction was
// committed.
func (m *Monitor) Expect(a netip.Addr) func(ctx context.Context) (time.Time, error) {
	ch := make(chan time.Time, 1)
	m.mu.Lock()
	if at, ok := m.seen[a]; ok {
		ch <- at
	} else {
		m.waiters[a] = ch
	}
	m.mu.Unlock()
	return func(ctx context.Context) (time.Time, error) {
		select {
		case at := <-ch:
			return at, nil
		case <-m.done:
			select {
			case at := <-ch:
				return at, nil
			default:
			}
			m.mu.Lock()
			err := m.err
			m.mu.Unlock()
			return time.Time{}, fmt.Errorf("monitor stopped before %s showed (%d overflows of its socket): %w", a, m.Lost(), err)
		case <-ctx.Done():
			m.mu.Lock()
			delete(m.waiters, a)
			m.mu.Unlock()
			return time.Time{}, fmt.Errorf("%s not in the kernel (%d overflows of the monitor's socket): %w", a, m.Lost(), ctx.Err())
		}
	}
}
