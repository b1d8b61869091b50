package nodestate

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// Decode reads one State and refuses a State of another APIVersion, naming
// both, rather than misread it.
func Decode(r io.Reader) (*State, error) {
	var st State
	if err := json.NewDecoder(r).Decode(&st); err != nil {
		return nil, fmt.Errorf("decode the node state: %w", err)
	}
	if st.APIVersion != APIVersion {
		return nil, fmt.Errorf("node state of node %q has apiVersion %q; this program reads %q (use a kubectl-vcoil of vcoild's version)",
			st.Node, st.APIVersion, APIVersion)
	}
	return &st, nil
}

// maxState bounds the State a client reads (a node of a few hundred pods
// and thousands of Services serves a few MiB).
const maxState = 256 << 20

// Get reads the State that vcoild serves at baseURL (as
// "http://127.0.0.1:9390", or the local end of a port-forward).
func Get(ctx context.Context, c *http.Client, baseURL string) (*State, error) {
	url := strings.TrimSuffix(baseURL, "/") + Path
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, fmt.Errorf("get the node state from %s: %w", url, err)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return nil, fmt.Errorf("get the node state from %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return nil, fmt.Errorf("get the node state from %s: %s: %s", url, resp.Status, strings.TrimSpace(string(body)))
	}
	// The body is read to its end before it is closed: a socket closed
	// with unread bytes (the encoder's final newline) is reset, and a
	// port-forward between then logs the reset as an error.
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxState))
	if err != nil {
		return nil, fmt.Errorf("get the node state from %s: %w", url, err)
	}
	if len(body) == maxState {
		return nil, fmt.Errorf("get the node state from %s: larger than %d MiB", url, maxState>>20)
	}
	st, err := Decode(bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", url, err)
	}
	return st, nil
}
