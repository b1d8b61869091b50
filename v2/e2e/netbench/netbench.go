// Package netbench measures a path between two network endpoints with
// plain TCP, as make bench-dataplane does between pods: the throughput of
// one or more bulk streams and the round trip of a 1-byte request and its
// 1-byte reply (a ping-pong on one connection, Nagle off). The server
// side sinks bulk streams and echoes ping-pongs; the client says which of
// the two a connection is with its first byte.
//
// It is vcoil's own tool rather than iperf3 so that both measurements come
// from one binary in the e2e agent image, as JSON, with the percentiles of
// the round trip (iperf3 has no request/response mode).
package netbench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"time"
)

// The first byte of a connection: what the server does with it.
const (
	modeSink byte = 's'
	modeEcho byte = 'e'
)

// bufSize is what a bulk stream writes and reads at a time.
const bufSize = 128 << 10

// Serve accepts connections on l until ctx ends or l is closed: a sink
// connection is read to its end and answered with the byte count (8
// bytes, big endian), an echo connection has every byte sent back.
func Serve(ctx context.Context, l net.Listener) error {
	go func() {
		<-ctx.Done()
		l.Close()
	}()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		c, err := l.Accept()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return nil
			}
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			_ = serveConn(c)
		}()
	}
}

func serveConn(c net.Conn) error {
	var mode [1]byte
	if _, err := io.ReadFull(c, mode[:]); err != nil {
		return err
	}
	switch mode[0] {
	case modeSink:
		n, err := io.CopyBuffer(io.Discard, c, make([]byte, bufSize))
		if err != nil {
			return err
		}
		var count [8]byte
		binary.BigEndian.PutUint64(count[:], uint64(n))
		_, err = c.Write(count[:])
		return err
	case modeEcho:
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetNoDelay(true)
		}
		b := make([]byte, 1)
		for {
			if _, err := io.ReadFull(c, b); err != nil {
				if errors.Is(err, io.EOF) {
					return nil
				}
				return err
			}
			if _, err := c.Write(b); err != nil {
				return err
			}
		}
	default:
		return fmt.Errorf("unknown mode %q", mode[0])
	}
}

// Dialer opens the client's connections (a namespace-bound dialer in
// tests; net.Dialer in the agent).
type Dialer interface {
	DialContext(ctx context.Context, network, address string) (net.Conn, error)
}

// Throughput is the result of bulk streams.
type Throughput struct {
	Streams int `json:"streams"`
	// Bytes is what the server counted over all streams.
	Bytes    int64         `json:"bytes"`
	Duration time.Duration `json:"duration_ns"`
	// Gbps is Bytes in Duration, in 10^9 bits per second.
	Gbps float64 `json:"gbps"`
	// MaxStall is the longest a stream's write waited (from one write's
	// return to the next's, each writing bufSize): where a path stalls and
	// recovers, the throughput alone hides it.
	MaxStall time.Duration `json:"max_stall_ns"`
}

// Stream sends bulk data to address on streams connections at once for
// d, closes them and returns what the server received in all. The
// duration runs from the first write to the last count received.
func Stream(ctx context.Context, dial Dialer, address string, streams int, d time.Duration) (Throughput, error) {
	if streams < 1 {
		return Throughput{}, fmt.Errorf("%d streams: want at least 1", streams)
	}
	conns := make([]net.Conn, 0, streams)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range streams {
		c, err := dial.DialContext(ctx, "tcp", address)
		if err != nil {
			return Throughput{}, fmt.Errorf("connect to %s: %w", address, err)
		}
		conns = append(conns, c)
		if _, err := c.Write([]byte{modeSink}); err != nil {
			return Throughput{}, fmt.Errorf("to %s: %w", address, err)
		}
	}
	start := time.Now()
	deadline := start.Add(d)
	counts := make([]int64, streams)
	stalls := make([]time.Duration, streams)
	errs := make([]error, streams)
	var wg sync.WaitGroup
	for i, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			counts[i], stalls[i], errs[i] = sink(ctx, c, deadline)
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err := errors.Join(errs...); err != nil {
		return Throughput{}, fmt.Errorf("to %s: %w", address, err)
	}
	var total int64
	for _, n := range counts {
		total += n
	}
	return Throughput{Streams: streams, Bytes: total, Duration: elapsed, Gbps: float64(total) * 8 / elapsed.Seconds() / 1e9,
		MaxStall: slices.Max(stalls)}, nil
}

// sink writes to c until deadline, half-closes it and reads the server's
// count of what arrived; it returns the count and the longest a write
// waited.
func sink(ctx context.Context, c net.Conn, deadline time.Time) (int64, time.Duration, error) {
	buf := make([]byte, bufSize)
	// A stalled path must not hold the benchmark: no write may block
	// beyond the deadline by more than a few seconds.
	_ = c.SetWriteDeadline(deadline.Add(5 * time.Second))
	var stall time.Duration
	last := time.Now()
	for last.Before(deadline) && ctx.Err() == nil {
		if _, err := c.Write(buf); err != nil {
			return 0, max(stall, time.Since(last)), fmt.Errorf("write: %w (no write for %s)", err, time.Since(last).Round(time.Millisecond))
		}
		now := time.Now()
		stall, last = max(stall, now.Sub(last)), now
	}
	if tc, ok := c.(interface{ CloseWrite() error }); ok {
		if err := tc.CloseWrite(); err != nil {
			return 0, stall, err
		}
	}
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	var count [8]byte
	if _, err := io.ReadFull(c, count[:]); err != nil {
		return 0, stall, fmt.Errorf("read the server's count: %w", err)
	}
	return int64(binary.BigEndian.Uint64(count[:])), stall, nil
}

// Latency is the result of a ping-pong.
type Latency struct {
	Count int `json:"count"`
	// P50, P99 and Max are round trips, in microseconds.
	P50 float64 `json:"p50_us"`
	P99 float64 `json:"p99_us"`
	Max float64 `json:"max_us"`
}

// PingPong sends count 1-byte requests to address on one connection, each
// after the reply to the one before, and returns the round trips' spread.
// The first warm round trips (the connection's, the path's first
// packets) are not counted.
func PingPong(ctx context.Context, dial Dialer, address string, count int) (Latency, error) {
	const warm = 10
	if count < 1 {
		return Latency{}, fmt.Errorf("%d round trips: want at least 1", count)
	}
	c, err := dial.DialContext(ctx, "tcp", address)
	if err != nil {
		return Latency{}, fmt.Errorf("connect to %s: %w", address, err)
	}
	defer c.Close()
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	if _, err := c.Write([]byte{modeEcho}); err != nil {
		return Latency{}, err
	}
	rtts := make([]time.Duration, 0, count)
	b := []byte{0}
	for i := range count + warm {
		if ctx.Err() != nil {
			return Latency{}, ctx.Err()
		}
		// One round trip may take long on a loaded machine, never this.
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		start := time.Now()
		if _, err := c.Write(b); err != nil {
			return Latency{}, fmt.Errorf("round trip %d: %w", i, err)
		}
		if _, err := io.ReadFull(c, b); err != nil {
			return Latency{}, fmt.Errorf("round trip %d: %w", i, err)
		}
		if i >= warm {
			rtts = append(rtts, time.Since(start))
		}
	}
	return Summarize(rtts), nil
}

// Summarize is the spread of round trips (nearest-rank percentiles).
func Summarize(rtts []time.Duration) Latency {
	if len(rtts) == 0 {
		return Latency{}
	}
	s := slices.Clone(rtts)
	slices.Sort(s)
	at := func(p float64) float64 {
		i := int(p*float64(len(s))+0.999999) - 1
		return float64(s[max(0, min(i, len(s)-1))]) / float64(time.Microsecond)
	}
	return Latency{Count: len(s), P50: at(0.50), P99: at(0.99), Max: float64(s[len(s)-1]) / float64(time.Microsecond)}
}
