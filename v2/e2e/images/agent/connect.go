package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// usageError is a mistake in the command line (exit status 2).
type usageError struct{ error }

func isUsageError(err error) bool {
	var u usageError
	return errors.As(err, &u) || strings.Contains(err.Error(), "unknown flag") ||
		strings.Contains(err.Error(), "accepts ") || strings.Contains(err.Error(), "invalid argument")
}

func connectCommand() *cobra.Command {
	var (
		timeout time.Duration
		message string
		path    string
		upload  int64
	)
	cmd := &cobra.Command{
		Use:   "connect tcp|udp|http HOST:PORT",
		Short: "connect to an agent server, print its answer, exit 0 when the answer is right",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, _, err := net.SplitHostPort(args[1]); err != nil {
				return usageError{fmt.Errorf("address %q: %w", args[1], err)}
			}
			if message == "" {
				h, _ := os.Hostname()
				message = "hello from " + h
			}
			var (
				answer string
				err    error
			)
			switch args[0] {
			case "tcp":
				answer, err = connectTCP(args[1], message, timeout)
			case "udp":
				answer, err = connectUDP(args[1], message, timeout)
			case "http":
				if upload > 0 {
					answer, err = uploadHTTP(args[1], upload, timeout)
				} else {
					answer, err = connectHTTP(args[1], path, timeout)
				}
			default:
				return usageError{fmt.Errorf("protocol %q: want tcp, udp or http", args[0])}
			}
			if answer != "" {
				fmt.Fprintln(cmd.OutOrStdout(), strings.TrimRight(answer, "\n"))
			}
			return err
		},
	}
	cmd.Flags().DurationVar(&timeout, "timeout", 2*time.Second, "give up after this long")
	cmd.Flags().StringVar(&message, "message", "", `what to send to an echo server (default "hello from HOSTNAME")`)
	cmd.Flags().StringVar(&path, "path", "/", "HTTP path")
	cmd.Flags().Int64Var(&upload, "upload", 0, "http: POST this many bytes to /upload and check the count and SHA-256 the server answers")
	return cmd
}

func connectTCP(addr, message string, timeout time.Duration) (string, error) {
	deadline := time.Now().Add(timeout)
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(deadline)
	if _, err := io.WriteString(c, message); err != nil {
		return "", err
	}
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		return "", err
	}
	got, err := io.ReadAll(io.LimitReader(c, maxMessage))
	if err != nil {
		return string(got), err
	}
	if string(got) != message {
		return string(got), fmt.Errorf("%w: echo %q, sent %q", errWrongAnswer, got, message)
	}
	return string(got), nil
}

func connectUDP(addr, message string, timeout time.Duration) (string, error) {
	c, err := net.DialTimeout("udp", addr, timeout)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(timeout))
	if _, err := io.WriteString(c, message); err != nil {
		return "", err
	}
	buf := make([]byte, maxMessage)
	n, err := c.Read(buf)
	if err != nil {
		return "", err
	}
	if !bytes.Equal(buf[:n], []byte(message)) {
		return string(buf[:n]), fmt.Errorf("%w: echo %q, sent %q", errWrongAnswer, buf[:n], message)
	}
	return string(buf[:n]), nil
}

func connectHTTP(addr, path string, timeout time.Duration) (string, error) {
	if !strings.HasPrefix(path, "/") {
		path = "/" + path
	}
	client := &http.Client{Timeout: timeout}
	resp, err := client.Get("http://" + addr + path)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxMessage))
	if err != nil {
		return string(body), err
	}
	if resp.StatusCode != http.StatusOK {
		return string(body), fmt.Errorf("%w: HTTP status %s", errWrongAnswer, resp.Status)
	}
	return string(body), nil
}

// uploadHTTP posts size pseudo-random bytes to /upload and checks that the
// server received them all, unchanged: a tunnel that loses or garbles
// large packets (an MTU too large for the encapsulation) fails here even
// when a small GET works.
func uploadHTTP(addr string, size int64, timeout time.Duration) (string, error) {
	h := sha256.New()
	var seed [32]byte // another stream each run
	for i := range seed {
		seed[i] = byte(rand.Uint32())
	}
	body := io.TeeReader(io.LimitReader(rand.NewChaCha8(seed), size), h)
	client := &http.Client{Timeout: timeout}
	req, err := http.NewRequest(http.MethodPost, "http://"+addr+"/upload", body)
	if err != nil {
		return "", err
	}
	req.ContentLength = size
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err := client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(io.LimitReader(resp.Body, maxMessage))
	if err != nil {
		return string(answer), err
	}
	if resp.StatusCode != http.StatusOK {
		return string(answer), fmt.Errorf("%w: HTTP status %s", errWrongAnswer, resp.Status)
	}
	var got uploaded
	if err := json.Unmarshal(answer, &got); err != nil {
		return string(answer), fmt.Errorf("%w: %v", errWrongAnswer, err)
	}
	if sum := hex.EncodeToString(h.Sum(nil)); got.Bytes != size || got.SHA256 != sum {
		return string(answer), fmt.Errorf("%w: the server got %d bytes with SHA-256 %s, sent %d with %s", errWrongAnswer, got.Bytes, got.SHA256, size, sum)
	}
	return string(answer), nil
}
