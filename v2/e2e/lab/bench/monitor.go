package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/netip"
	"os/exec"
	"strings"
	"sync"
	"time"
)

// Monitor watches what a proxy writes into the kernel the way the
// benchmark measures both proxies alike: `nft monitor` in the node's network
// namespace prints every object a transaction adds, then a "# new
// generation N" line when the transaction is over. The monitor notes, for
// every benchmark endpoint address, when its transaction was committed:
// the time of generation N's notice from the kernel (GenClock), read as
// it comes. nft prints a transaction of 100,000 elements over seconds, and
// a proxy that writes a table in many transactions (vcoil's, over
// netlink) would otherwise be charged for the time nft takes to print all
// but the last. Without a clock's time, the time the transaction's first
// line was read stands in for it, and the time a line was read for one
// change.
//
// It recognises addresses only, not the proxy's rule forms, so that the
// same reading serves kube-proxy's chains and rules and vcoil's map
// elements.
type Monitor struct {
	mu sync.Mutex
	// seen holds the addresses of EndpointRange seen since the last Reset.
	seen map[netip.Addr]sighting
	// txnStart is when the current transaction's first line was read; zero
	// between transactions.
	txnStart time.Time
	// cur are the addresses the current transaction brought, with the time
	// their line was read: they count once the transaction is over.
	cur map[netip.Addr]time.Time
	// clock dates transactions by the kernel's notices; nil: by nft's lines.
	clock *GenClock
	// waiters are woken when an address they wait for shows.
	waiters map[netip.Addr]chan sighting
	// err is why the monitor stopped reading.
	err  error
	done chan struct{}
}

// sighting: when an address's line was read (at), and when its
// transaction was committed (txn; kernel tells whether the kernel dated it).
type sighting struct {
	at, txn time.Time
	kernel  bool
}

// when is the best date of a sighting: the kernel's, else the line's.
func (s sighting) when() time.Time {
	if s.kernel {
		return s.txn
	}
	return s.at
}

// StartMonitor runs `nft monitor` in the network namespace at netnsPath
// until ctx ends.
func StartMonitor(ctx context.Context, netnsPath string) (*Monitor, error) {
	// The clock listens before nft does, so that it has every generation
	// nft prints.
	clock, err := StartGenClock(ctx, netnsPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, "nsenter", "--net="+netnsPath, "--", "nft", "monitor")
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("nft monitor in %s: %w", netnsPath, err)
	}
	m := NewMonitor()
	m.clock = clock
	go func() {
		err := m.Read(out)
		if werr := cmd.Wait(); err == nil && werr != nil && ctx.Err() == nil {
			err = fmt.Errorf("nft monitor in %s: %w: %s", netnsPath, werr, stderr.String())
		}
		m.stop(err)
	}()
	return m, nil
}

// NewMonitor is a monitor fed by Read (StartMonitor feeds it from nft).
func NewMonitor() *Monitor {
	return &Monitor{seen: map[netip.Addr]sighting{}, cur: map[netip.Addr]time.Time{}, waiters: map[netip.Addr]chan sighting{}, done: make(chan struct{})}
}

// Read consumes nft monitor's output until it ends.
func (m *Monitor) Read(r io.Reader) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 1<<16), 1<<24)
	for sc.Scan() {
		m.line(sc.Text(), time.Now())
	}
	return sc.Err()
}

func (m *Monitor) stop(err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.err = err
	close(m.done)
}

// line takes one line of nft monitor read at now.
func (m *Monitor) line(l string, now time.Time) {
	if strings.HasPrefix(l, "# new generation") {
		var gen uint32
		var committed time.Time
		var kernel bool
		if _, err := fmt.Sscanf(l, "# new generation %d", &gen); err == nil && m.clock != nil {
			// The kernel's notice is read as it comes, nft's line later:
			// the wait is for a notice the socket lost.
			committed, kernel = m.clock.At(gen, time.Second)
		}
		m.commit(committed, kernel)
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.txnStart.IsZero() {
		m.txnStart = now
	}
	for _, a := range benchAddrs(l) {
		if _, ok := m.seen[a]; ok {
			continue
		}
		if _, ok := m.cur[a]; !ok {
			m.cur[a] = now
		}
	}
}

// commit ends the current transaction: its addresses count, dated
// committed when kernel is set, else by the transaction's first line.
func (m *Monitor) commit(committed time.Time, kernel bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !kernel {
		committed = m.txnStart
	}
	for a, at := range m.cur {
		s := sighting{at: at, txn: committed, kernel: kernel}
		m.seen[a] = s
		if w, ok := m.waiters[a]; ok {
			w <- s
			delete(m.waiters, a)
		}
	}
	m.cur = map[netip.Addr]time.Time{}
	m.txnStart = time.Time{}
}

// benchAddrs returns the addresses of EndpointRange that the line names
// (10.200.0.1 in "__10.200.0.1/8080" or "10.200.0.1 . 8080").
func benchAddrs(l string) []netip.Addr {
	var out []netip.Addr
	for {
		i := strings.Index(l, "10.20")
		if i < 0 {
			return out
		}
		// The address must start there, not inside a longer number.
		if i > 0 && (l[i-1] >= '0' && l[i-1] <= '9' || l[i-1] == '.') {
			l = l[i+5:]
			continue
		}
		j := i
		for j < len(l) && (l[j] >= '0' && l[j] <= '9' || l[j] == '.') {
			j++
		}
		if a, err := netip.ParseAddr(l[i:j]); err == nil && EndpointRange.Contains(a) {
			out = append(out, a)
		}
		l = l[j:]
	}
}

// Reset forgets the addresses seen so far: what comes after is counted.
func (m *Monitor) Reset() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.seen = map[netip.Addr]sighting{}
}

// Count is how many distinct benchmark addresses were seen since Reset.
func (m *Monitor) Count() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.seen)
}

// WaitCount waits until want distinct addresses were seen since Reset and
// returns when the transaction that completed them began; on timeout it
// returns how many it saw.
func (m *Monitor) WaitCount(ctx context.Context, want int) (time.Time, error) {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		m.mu.Lock()
		n, err := len(m.seen), m.err
		var last time.Time
		if n >= want {
			for _, s := range m.seen {
				if s.txn.After(last) {
					last = s.txn
				}
			}
		}
		m.mu.Unlock()
		if n >= want {
			return last, nil
		}
		select {
		case <-m.done:
			return time.Time{}, fmt.Errorf("nft monitor stopped after %d of %d addresses: %v", n, want, err)
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("%d of %d addresses in the kernel: %w", n, want, ctx.Err())
		case <-tick.C:
		}
	}
}

// Expect registers an address before the change that brings it; the
// returned function waits for it and returns when its transaction was
// committed (without the kernel's date: when its line was read).
func (m *Monitor) Expect(a netip.Addr) func(ctx context.Context) (time.Time, error) {
	ch := make(chan sighting, 1)
	m.mu.Lock()
	if s, ok := m.seen[a]; ok {
		ch <- s
	} else {
		m.waiters[a] = ch
	}
	m.mu.Unlock()
	return func(ctx context.Context) (time.Time, error) {
		select {
		case s := <-ch:
			return s.when(), nil
		case <-m.done:
			return time.Time{}, fmt.Errorf("nft monitor stopped before %s showed: %v", a, m.err)
		case <-ctx.Done():
			m.mu.Lock()
			delete(m.waiters, a)
			m.mu.Unlock()
			return time.Time{}, fmt.Errorf("%s not in the kernel: %w", a, ctx.Err())
		}
	}
}
