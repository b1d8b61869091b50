package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/spf13/cobra"
)

// maxMessage bounds what an echo server reads from one connection or
// datagram.
const maxMessage = 64 << 10

func serveCommand() *cobra.Command {
	var tcpPort, udpPort, httpPort int
	cmd := &cobra.Command{
		Use:   "serve [--tcp PORT] [--udp PORT] [--http PORT]",
		Short: "run echo servers on all addresses until SIGTERM (no port: just wait)",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			return serve(ctx, tcpPort, udpPort, httpPort)
		},
	}
	cmd.Flags().IntVar(&tcpPort, "tcp", 0, "TCP echo port (0: none)")
	cmd.Flags().IntVar(&udpPort, "udp", 0, "UDP echo port (0: none)")
	cmd.Flags().IntVar(&httpPort, "http", 0, "HTTP port (0: none)")
	return cmd
}

func serve(ctx context.Context, tcpPort, udpPort, httpPort int) error {
	hostname, _ := os.Hostname()
	errs := make(chan error, 3)
	if tcpPort > 0 {
		l, err := net.Listen("tcp", ":"+strconv.Itoa(tcpPort))
		if err != nil {
			return err
		}
		defer l.Close()
		log.Printf("tcp echo on %s", l.Addr())
		go func() { errs <- serveTCP(l) }()
	}
	if udpPort > 0 {
		c, err := net.ListenPacket("udp", ":"+strconv.Itoa(udpPort))
		if err != nil {
			return err
		}
		defer c.Close()
		log.Printf("udp echo on %s", c.LocalAddr())
		go func() { errs <- serveUDP(c) }()
	}
	if httpPort > 0 {
		l, err := net.Listen("tcp", ":"+strconv.Itoa(httpPort))
		if err != nil {
			return err
		}
		srv := &http.Server{Handler: httpHandler(hostname), ReadHeaderTimeout: 10 * time.Second}
		defer srv.Close()
		log.Printf("http on %s", l.Addr())
		go func() { errs <- srv.Serve(l) }()
	}
	select {
	case <-ctx.Done():
		return nil
	case err := <-errs:
		return err
	}
}

func serveTCP(l net.Listener) error {
	for {
		c, err := l.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return err
		}
		go func() {
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(30 * time.Second))
			n, err := io.Copy(c, io.LimitReader(c, maxMessage))
			log.Printf("tcp from %s: echoed %d bytes (%v)", c.RemoteAddr(), n, err)
		}()
	}
}

func serveUDP(c net.PacketConn) error {
	buf := make([]byte, maxMessage)
	for {
		n, from, err := c.ReadFrom(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return err
		}
		_, err = c.WriteTo(buf[:n], from)
		log.Printf("udp from %s: echoed %d bytes (%v)", from, n, err)
	}
}

// whoami is the answer of the HTTP server's root path.
type whoami struct {
	Hostname string `json:"hostname"`
	Client   string `json:"client"`
}

// uploaded is the answer of POST /upload: what the server received, so
// that the client checks that every byte went through, and from which
// source address.
type uploaded struct {
	Bytes  int64  `json:"bytes"`
	Client string `json:"client"`
	SHA256 string `json:"sha256"`
}

func httpHandler(hostname string) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /upload", func(w http.ResponseWriter, r *http.Request) {
		h := sha256.New()
		n, err := io.Copy(h, r.Body)
		if err != nil {
			log.Printf("http upload from %s: %d bytes, then %v", r.RemoteAddr, n, err)
			http.Error(w, fmt.Sprintf("read the body after %d bytes: %v", n, err), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(uploaded{Bytes: n, Client: r.RemoteAddr, SHA256: hex.EncodeToString(h.Sum(nil))})
		log.Printf("http upload from %s: %d bytes", r.RemoteAddr, n)
	})
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(whoami{Hostname: hostname, Client: r.RemoteAddr})
		log.Printf("http from %s: %s", r.RemoteAddr, r.URL.Path)
	})
	mux.HandleFunc("GET /hostname", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, hostname)
	})
	mux.HandleFunc("GET /clientip", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, r.RemoteAddr)
	})
	return mux
}
