package netbench

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"testing"
	"time"
)

func serveLoopback(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, l) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return l.Addr().String()
}

// Streams to a server on loopback: the server's count of every stream is
// the result, and it is what was sent.
func TestStreamCountsWhatTheServerReceived(t *testing.T) {
	addr := serveLoopback(t)
	r, err := Stream(t.Context(), &net.Dialer{}, addr, 3, 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if r.Streams != 3 || r.Bytes < bufSize || r.Bytes%bufSize != 0 || r.Duration < 200*time.Millisecond || r.Gbps <= 0 {
		t.Fatalf("result %+v: want 3 streams of whole buffers over at least 200ms", r)
	}
	if _, err := Stream(t.Context(), &net.Dialer{}, addr, 0, time.Second); err == nil {
		t.Fatal("0 streams accepted")
	}
}

// A ping-pong counts the round trips asked for, not the warm ones.
func TestPingPongCountsRoundTrips(t *testing.T) {
	addr := serveLoopback(t)
	r, err := PingPong(t.Context(), &net.Dialer{}, addr, 50)
	if err != nil {
		t.Fatal(err)
	}
	if r.Count != 50 || r.P50 <= 0 || r.P99 < r.P50 || r.Max < r.P99 {
		t.Fatalf("result %+v", r)
	}
}

// A dead server is an error naming the address.
func TestUnreachableServer(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	if _, err := PingPong(t.Context(), &net.Dialer{}, addr, 1); err == nil {
		t.Fatal("PingPong to a closed port succeeded")
	}
	if _, err := Stream(t.Context(), &net.Dialer{}, addr, 1, time.Second); err == nil {
		t.Fatal("Stream to a closed port succeeded")
	}
}

func TestSummarizeNearestRank(t *testing.T) {
	var rtts []time.Duration
	for i := 100; i >= 1; i-- {
		rtts = append(rtts, time.Duration(i)*time.Microsecond)
	}
	if got := Summarize(rtts); got.P50 != 50 || got.P99 != 99 || got.Max != 100 || got.Count != 100 {
		t.Fatalf("Summarize = %+v, want p50 50, p99 99, max 100", got)
	}
	if got := Summarize(nil); got.Count != 0 {
		t.Fatalf("Summarize(nil) = %+v", got)
	}
}

// A stream whose server stops reading for a while reports the wait as its
// longest stall; the same stream to a server that reads on reports less.
func TestStreamReportsItsLongestStall(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	const pause = 800 * time.Millisecond
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		buf := make([]byte, bufSize)
		var n int64
		for n < 1<<20 {
			m, err := c.Read(buf)
			if err != nil {
				return
			}
			n += int64(m)
		}
		time.Sleep(pause) // the path stalls: nothing is read
		m, _ := io.CopyBuffer(io.Discard, c, buf)
		var count [8]byte
		binary.BigEndian.PutUint64(count[:], uint64(n+m-1)) // without the mode byte
		_, _ = c.Write(count[:])
	}()
	r, err := Stream(t.Context(), &net.Dialer{}, l.Addr().String(), 1, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if r.MaxStall < pause/2 {
		t.Fatalf("longest stall %s through a pause of %s: want at least half of it", r.MaxStall, pause)
	}
	ok, err := Stream(t.Context(), &net.Dialer{}, serveLoopback(t), 1, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if ok.MaxStall >= pause/2 {
		t.Fatalf("longest stall %s to a server that reads on", ok.MaxStall)
	}
}
