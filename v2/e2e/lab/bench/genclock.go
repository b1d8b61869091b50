package bench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// nfnetlink: the nftables subsystem, its multicast group, the messages
// that add set elements and end a transaction, and the generation's id.
const (
	NFNLSubsysNFTables = 10
	nfnlGroupNFTables  = 7
	NFTMsgNewSetElem   = 12
	nftMsgNewGen       = 15
	nftaGenID          = 1
)

// GenClock dates nftables transactions by the kernel's own notice of each
// commit (a new generation, with its id), read from a netlink socket as
// it comes. `nft monitor` prints a transaction of 100,000 elements over
// seconds, and a table written in a hundred netlink transactions would be
// dated by when nft got round to printing each; the monitor reads the
// generation's id from nft's "# new generation" line and takes its time
// from here.
type GenClock struct {
	fd   int
	mu   sync.Mutex
	cond *sync.Cond
	gens map[uint32]time.Time
	// lost counts the times the socket overflowed (notices dropped).
	lost atomic.Int64
	done bool
	err  error
}

// StartGenClock listens in the network namespace at nsPath until ctx ends.
func StartGenClock(ctx context.Context, nsPath string) (*GenClock, error) {
	fd, err := NFTablesSocket(nsPath)
	if err != nil {
		return nil, err
	}
	g := &GenClock{fd: fd, gens: map[uint32]time.Time{}}
	g.cond = sync.NewCond(&g.mu)
	go g.read(ctx)
	return g, nil
}

func (g *GenClock) read(ctx context.Context) {
	err := ReadNotices(ctx, g.fd, &g.lost, func(now time.Time, msgs []syscall.NetlinkMessage) {
		for _, m := range msgs {
			if m.Header.Type != NFNLSubsysNFTables<<8|nftMsgNewGen {
				continue
			}
			if id, ok := genID(m.Data); ok {
				g.mu.Lock()
				g.gens[id] = now
				g.cond.Broadcast()
				g.mu.Unlock()
			}
		}
	})
	unix.Close(g.fd)
	g.mu.Lock()
	g.err, g.done = err, true
	g.cond.Broadcast()
	g.mu.Unlock()
}

// ReadNotices reads an nftables notice socket (NFTablesSocket) until ctx
// ends or the socket fails, and hands each datagram's messages to fn with
// the time it was read; lost counts the socket's overflows (notices the
// kernel dropped). The caller closes fd.
func ReadNotices(ctx context.Context, fd int, lost *atomic.Int64, fn func(now time.Time, msgs []syscall.NetlinkMessage)) error {
	buf := make([]byte, 1<<20)
	for ctx.Err() == nil {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		switch {
		case errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.ENOBUFS):
			lost.Add(1)
			continue
		case err != nil:
			return err
		}
		now := time.Now()
		msgs, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			continue
		}
		fn(now, msgs)
	}
	return nil
}

// genID reads NFTA_GEN_ID from a NEWGEN message's payload: a 4-byte
// nfgenmsg, then attributes.
func genID(b []byte) (uint32, bool) {
	if len(b) < 4 {
		return 0, false
	}
	b = b[4:]
	for len(b) >= 4 {
		l := int(binary.NativeEndian.Uint16(b))
		typ := binary.NativeEndian.Uint16(b[2:]) &^ (unix.NLA_F_NESTED | unix.NLA_F_NET_BYTEORDER)
		if l < 4 || l > len(b) {
			return 0, false
		}
		if typ == nftaGenID && l >= 8 {
			return binary.BigEndian.Uint32(b[4:8]), true
		}
		b = b[min((l+3)&^3, len(b)):]
	}
	return 0, false
}

// At returns when generation id was committed, waiting up to wait for the
// notice; false when it did not come (or the clock stopped).
func (g *GenClock) At(id uint32, wait time.Duration) (time.Time, bool) {
	deadline := time.Now().Add(wait)
	timer := time.AfterFunc(wait, func() {
		g.mu.Lock()
		g.cond.Broadcast()
		g.mu.Unlock()
	})
	defer timer.Stop()
	g.mu.Lock()
	defer g.mu.Unlock()
	for {
		if t, ok := g.gens[id]; ok {
			delete(g.gens, id)
			return t, true
		}
		if g.done || !time.Now().Before(deadline) {
			return time.Time{}, false
		}
		g.cond.Wait()
	}
}

// Lost is how many times the clock's socket overflowed.
func (g *GenClock) Lost() int64 { return g.lost.Load() }

// NFTablesSocket opens a netfilter netlink socket in the network namespace
// at nsPath, subscribed to nftables' notices, with a large buffer and a
// 1 s receive timeout (so that a reader sees its context end). A socket
// stays in the namespace it was made in.
func NFTablesSocket(nsPath string) (int, error) {
	type result struct {
		fd  int
		err error
	}
	ch := make(chan result, 1)
	go func() {
		// The thread is thrown away (never unlocked) if it cannot go back
		// to its namespace.
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			ch <- result{-1, err}
			return
		}
		defer orig.Close()
		target, err := netns.GetFromPath(nsPath)
		if err != nil {
			ch <- result{-1, err}
			return
		}
		defer target.Close()
		if err := netns.Set(target); err != nil {
			ch <- result{-1, fmt.Errorf("enter %s: %w", nsPath, err)}
			return
		}
		fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_NETFILTER)
		if err == nil {
			err = unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: 1 << (nfnlGroupNFTables - 1)})
		}
		if netns.Set(orig) == nil {
			runtime.UnlockOSThread()
		}
		if err != nil {
			if fd >= 0 {
				unix.Close(fd)
			}
			ch <- result{-1, fmt.Errorf("netfilter netlink socket in %s: %w", nsPath, err)}
			return
		}
		ch <- result{fd, nil}
	}()
	r := <-ch
	if r.err != nil {
		return -1, r.err
	}
	_ = unix.SetsockoptInt(r.fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 64<<20)
	_ = unix.SetsockoptTimeval(r.fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Sec: 1})
	return r.fd, nil
}
