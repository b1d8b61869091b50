package egress_test

import (
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/vcoil/vcoil/v2/internal/netnstest"
	"github.com/vcoil/vcoil/v2/pkg/egress"
)

// uploadChunk is what one benchmark iteration sends.
const uploadChunk = 16 << 20

// BenchmarkUpload measures TCP uploads from a client pod, in the same run:
// "direct" to a host that is no destination of the client's Egress (the
// pod's own path through the node), and "vxlan-router" to a destination,
// through the VXLAN tunnel, the Service's DNAT and a router pod that
// masquerades it. Results in MB/s (go test -bench, machine-readable).
func BenchmarkUpload(b *testing.B) {
	l := newLab(b, egress.KindVXLAN)
	sink(b, l.ext, ipv4.ext)
	sink(b, l.other, ipv4.other)
	for _, c := range []struct{ name, addr string }{
		{"direct", ipv4.other},
		{"vxlan-router", ipv4.ext},
	} {
		b.Run(c.name, func(b *testing.B) {
			buf := make([]byte, 256<<10)
			b.SetBytes(uploadChunk)
			for b.Loop() {
				upload(b, l.client, c.addr, buf)
			}
		})
	}
}

// sink serves on addr:7002 a TCP server that reads everything and answers
// how many bytes it read.
func sink(b *testing.B, ns *netnstest.NS, addr string) {
	ln := ns.Listen("tcp", net.JoinHostPort(addr, "7002"))
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(time.Minute))
				n, _ := io.Copy(io.Discard, c)
				_, _ = fmt.Fprint(c, n)
			}()
		}
	}()
}

// upload sends uploadChunk bytes to addr:7002 and checks the count the sink
// read.
func upload(b *testing.B, ns *netnstest.NS, addr string, buf []byte) {
	c, err := ns.Dial(b.Context(), "tcp", net.JoinHostPort(addr, "7002"))
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Minute))
	for sent := 0; sent < uploadChunk; sent += len(buf) {
		if _, err := c.Write(buf); err != nil {
			b.Fatalf("upload to %s: %v", addr, err)
		}
	}
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		b.Fatal(err)
	}
	got, err := io.ReadAll(c)
	if err != nil || string(got) != fmt.Sprint(uploadChunk) {
		b.Fatalf("upload to %s: the sink read %q bytes (%v), want %d", addr, got, err, uploadChunk)
	}
}
