package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
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

	// An upload of 1 MiB: the answer names every byte and the client.
	body, err = uploadHTTP(addr(httpPort), 1<<20, 5*time.Second)
	if err != nil {
		t.Fatalf("upload: %v (answer %q)", err, body)
	}
	var u uploaded
	if err := json.Unmarshal([]byte(body), &u); err != nil || u.Bytes != 1<<20 || len(u.SHA256) != 64 || !strings.HasPrefix(u.Client, "127.0.0.1:") {
		t.Errorf("upload answer: %q (%v)", body, err)
	}
	// Through the command, as the end-to-end tests run it.
	var out strings.Builder
	cmd := connectCommand()
	cmd.SetOut(&out)
	cmd.SetArgs([]string{"http", addr(httpPort), "--upload", "1000", "--timeout", "5s"})
	if err := cmd.Execute(); err != nil {
		t.Fatalf("connect http --upload: %v", err)
	}
	if err := json.Unmarshal([]byte(out.String()), &u); err != nil || u.Bytes != 1000 {
		t.Errorf("connect http --upload 1000 printed %q (%v)", out.String(), err)
	}
}

// TestUploadChecksTheServersCount: a server that got fewer bytes, or other
// bytes, than were sent is a wrong answer.
func TestUploadChecksTheServersCount(t *testing.T) {
	for name, answer := range map[string]func(n int64, sum string) uploaded{
		"fewer bytes": func(n int64, sum string) uploaded { return uploaded{Bytes: n - 1, SHA256: sum} },
		"other bytes": func(n int64, _ string) uploaded { return uploaded{Bytes: n, SHA256: strings.Repeat("0", 64)} },
	} {
		t.Run(name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				h := sha256.New()
				n, _ := io.Copy(h, r.Body)
				_ = json.NewEncoder(w).Encode(answer(n, hex.EncodeToString(h.Sum(nil))))
			}))
			defer srv.Close()
			if _, err := uploadHTTP(strings.TrimPrefix(srv.URL, "http://"), 4096, 5*time.Second); !errors.Is(err, errWrongAnswer) {
				t.Errorf("upload to a server that answers %s: %v, want a wrong answer", name, err)
			}
		})
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
