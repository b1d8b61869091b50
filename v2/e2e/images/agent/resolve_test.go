package main

import (
	"io"
	"net"
	"strings"
	"testing"

	"golang.org/x/net/dns/dnsmessage"
)

// dnsServer answers on loopback: name has the addresses v4 (A) and v6
// (AAAA), every other name does not exist.
func dnsServer(t *testing.T, name string, v4 [4]byte, v6 [16]byte) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 512)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			var p dnsmessage.Parser
			h, err := p.Start(buf[:n])
			if err != nil {
				continue
			}
			q, err := p.Question()
			if err != nil {
				continue
			}
			b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true})
			b.EnableCompression()
			_ = b.StartQuestions()
			_ = b.Question(q)
			_ = b.StartAnswers()
			rh := dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: 5}
			switch {
			case q.Name.String() != name:
				b = dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: h.ID, Response: true, RCode: dnsmessage.RCodeNameError})
				_ = b.StartQuestions()
				_ = b.Question(q)
			case q.Type == dnsmessage.TypeA:
				_ = b.AResource(rh, dnsmessage.AResource{A: v4})
			case q.Type == dnsmessage.TypeAAAA:
				_ = b.AAAAResource(rh, dnsmessage.AAAAResource{AAAA: v6})
			}
			msg, err := b.Finish()
			if err == nil {
				_, _ = pc.WriteTo(msg, from)
			}
		}
	}()
	return pc.LocalAddr().String()
}

func TestResolvePrintsBothFamilies(t *testing.T) {
	v6 := [16]byte{0x20, 0x01, 0x0d, 0xb8, 15: 7}
	server := dnsServer(t, "web.example.", [4]byte{198, 51, 100, 7}, v6)
	var out strings.Builder
	run := func(args ...string) error {
		out.Reset()
		cmd := resolveCommand()
		cmd.SetOut(&out)
		cmd.SetErr(io.Discard)
		cmd.SetArgs(args)
		return cmd.Execute()
	}
	if err := run("web.example.", "--server", server); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); got != "198.51.100.7\n2001:db8::7\n" {
		t.Errorf("resolve printed %q, want both addresses", got)
	}

	if err := run("gone.example.", "--server", server); err == nil || !strings.Contains(err.Error(), "no address of either family") {
		t.Errorf("a name without addresses: %v", err)
	}
	if err := run("web.example.", "--server", "127.0.0.1"); !isUsageError(err) {
		t.Errorf("--server without port: %v, want a usage error", err)
	}
}
