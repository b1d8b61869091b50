package main

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vcoil/vcoil/v2/internal/poll"
)

// freePort returns a port that was free a moment ago on the loopback.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func TestServeAndConnect(t *testing.T) {
	tcpPort, udpPort, httpPort := freePort(t), freePort(t), freePort(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- serve(ctx, tcpPort, udpPort, httpPort) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	addr := func(p int) string { return net.JoinHostPort("127.0.0.1", itoa(p)) }

	// The servers start in the background: wait for the HTTP one.
	poll.Eventually(t, 5*time.Second, func() error {
		_, err := connectHTTP(addr(httpPort), "/hostname", time.Second)
		return err
	})

	if got, err := connectTCP(addr(tcpPort), "ping over tcp", 2*time.Second); err != nil || got != "ping over tcp" {
		t.Errorf("tcp: %q, %v", got, err)
	}
	if got, err := connectUDP(addr(udpPort), "ping over udp", 2*time.Second); err != nil || got != "ping over udp" {
		t.Errorf("udp: %q, %v", got, err)
	}
	body, err := connectHTTP(addr(httpPort), "/", 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var w whoami
	if err := json.Unmarshal([]byte(body), &w); err != nil || w.Hostname == "" || !strings.HasPrefix(w.Client, "127.0.0.1:") {
		t.Errorf("http /: %q (%v)", body, err)
	}
	if _, err := connectHTTP(addr(httpPort), "/nothing-here", 2*time.Second); !errors.Is(err, errWrongAnswer) {
		t.Errorf("http to a missing path: %v, want a wrong answer", err)
	}
}

func TestConnectFailsWithoutServer(t *testing.T) {
	port := freePort(t)
	if _, err := connectTCP(net.JoinHostPort("127.0.0.1", itoa(port)), "x", time.Second); err == nil {
		t.Error("tcp to a closed port succeeded")
	}
	if _, err := connectUDP(net.JoinHostPort("127.0.0.1", itoa(port)), "x", 300*time.Millisecond); err == nil {
		t.Error("udp to a closed port succeeded")
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

func TestRoutesPrintsTheMainTable(t *testing.T) {
	var out strings.Builder
	cmd := routesCommand()
	cmd.SetOut(&out)
	cmd.SetArgs([]string{"--table", "255"}) // local: always has the loopback
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "local 127.0.0.1/32 dev lo") {
		t.Errorf("local table without the loopback:\n%s", out.String())
	}
}
