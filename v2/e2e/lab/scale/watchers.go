package scale

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"

	"k8s.io/client-go/rest"
)

// watchSet is what one vcoild watches in the whole cluster (its informers'
// resources, read from its controllers): one watch each, the scope and
// selectors vcoild uses. A simulated vcoild opens these watches and counts
// what the apiserver sends, without decoding or caching it: 1,000 real
// informer caches of 30,000 pods would not fit in this machine.
//
// allPods is the set before vcoild read the other nodes' pods from
// PodEndpoints: every Pod of the cluster instead of the node's own Pods
// and every PodEndpoint.
func watchSet(node string, allPods bool) []string {
	pods := []string{
		"/api/v1/pods?fieldSelector=" + url.QueryEscape("spec.nodeName="+node),
		"/apis/vcoil.io/v2/podendpoints",
	}
	if allPods {
		pods = []string{"/api/v1/pods"}
	}
	return append(pods,
		"/api/v1/namespaces",
		"/api/v1/services",
		"/apis/discovery.k8s.io/v1/endpointslices",
		"/apis/networking.k8s.io/v1/networkpolicies",
		"/api/v1/nodes",
		"/apis/vcoil.io/v2/addressblocks",
		"/apis/vcoil.io/v2/addresspools",
		"/apis/vcoil.io/v2/blockrequests?labelSelector="+url.QueryEscape("vcoil.io/node="+node),
		"/apis/vcoil.io/v2/egresses",
		"/apis/networking.k8s.io/v1/servicecidrs",
		// Watched only where the API is served; skipped otherwise.
		"/apis/policy.networking.k8s.io/v1beta1/clusternetworkpolicies",
	)
}

// resourceOf is the resource a watch path names ("pods", "podendpoints").
func resourceOf(path string) string {
	path, _, _ = strings.Cut(path, "?")
	return path[strings.LastIndexByte(path, '/')+1:]
}

// errNotServed: the apiserver does not serve the resource.
var errNotServed = errors.New("not served")

// watchers are simulated vcoilds' watches.
type watchers struct {
	events, bytes atomic.Int64
	errs          atomic.Int64
	// byResource counts the same per resource (keys fixed at the start).
	byResource map[string]*counts
	cancel     context.CancelFunc
	wg         sync.WaitGroup
}

type counts struct{ events, bytes atomic.Int64 }

// reset zeroes every count.
func (w *watchers) reset() {
	w.events.Store(0)
	w.bytes.Store(0)
	for _, c := range w.byResource {
		c.events.Store(0)
		c.bytes.Store(0)
	}
}

// startWatchers opens n simulated vcoilds' watch sets (allPods: the set
// before PodEndpoints), each from the current resource version (no initial
// listing: the steady state is measured).
func startWatchers(ctx context.Context, cfg *rest.Config, n int, allPods bool) (*watchers, error) {
	// Each simulated node has connections of its own, as a real one has
	// (a Dial of its own keeps client-go from sharing the transport), and
	// no request timeout: a watch lasts.
	own := func() (*http.Client, error) {
		c := rest.CopyConfig(cfg)
		c.Timeout = 0
		dial := cfg.Dial
		if dial == nil {
			dial = (&net.Dialer{}).DialContext
		}
		c.Dial = func(ctx context.Context, network, address string) (net.Conn, error) {
			return dial(ctx, network, address)
		}
		return rest.HTTPClientFor(c)
	}
	hc, err := own()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	w := &watchers{cancel: cancel, byResource: map[string]*counts{}}
	paths := watchSet(NodeName(0), allPods)
	rvs := make([]string, len(paths))
	for i, p := range paths {
		w.byResource[resourceOf(p)] = &counts{}
		rv, err := currentRV(ctx, hc, cfg.Host, p)
		switch {
		case errors.Is(err, errNotServed):
			rvs[i] = "" // skipped
		case err != nil:
			cancel()
			return nil, err
		default:
			rvs[i] = rv
		}
	}
	for k := range n {
		hc, err := own()
		if err != nil {
			cancel()
			return nil, err
		}
		for i, p := range watchSet(NodeName(k), allPods) {
			if rvs[i] == "" {
				continue
			}
			w.wg.Add(1)
			go func() {
				defer w.wg.Done()
				if err := w.watch(ctx, hc, cfg.Host, p, rvs[i], w.byResource[resourceOf(p)]); err != nil && ctx.Err() == nil {
					w.errs.Add(1)
				}
			}()
		}
	}
	return w, nil
}

func (w *watchers) stop() {
	w.cancel()
	w.wg.Wait()
}

// currentRV lists one object of the resource to learn its current
// resource version.
func currentRV(ctx context.Context, hc *http.Client, host, path string) (string, error) {
	u := host + path + sep(path) + "limit=1"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return "", err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return "", fmt.Errorf("list %s: %w", path, err)
	}
	defer resp.Body.Close()
	var l struct {
		Metadata struct {
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata"`
	}
	if resp.StatusCode == http.StatusNotFound {
		return "", fmt.Errorf("list %s: %w", path, errNotServed)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return "", fmt.Errorf("list %s: %s: %s", path, resp.Status, b)
	}
	if err := json.NewDecoder(resp.Body).Decode(&l); err != nil {
		return "", fmt.Errorf("list %s: %w", path, err)
	}
	return l.Metadata.ResourceVersion, nil
}

func sep(path string) string {
	if bytes.ContainsRune([]byte(path), '?') {
		return "&"
	}
	return "?"
}

// watch reads one watch stream until ctx ends, counting its events (one
// JSON object per line) and bytes.
func (w *watchers) watch(ctx context.Context, hc *http.Client, host, path, rv string, res *counts) error {
	u := host + path + sep(path) + "watch=1&allowWatchBookmarks=true&timeoutSeconds=3600&resourceVersion=" + url.QueryEscape(rv)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	// As vcoild's informers ask (controller-runtime asks for protobuf for
	// the built-in groups): protobuf, whose watch stream is length-framed,
	// for Kubernetes' own resources; JSON, one event per line, for the
	// custom ones, which the apiserver serves in JSON only.
	proto := !strings.Contains(path, "vcoil.io/") && !strings.Contains(path, "policy.networking.k8s.io/")
	if proto {
		req.Header.Set("Accept", "application/vnd.kubernetes.protobuf")
	} else {
		req.Header.Set("Accept", "application/json")
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("watch %s: %s", path, resp.Status)
	}
	if proto && !strings.Contains(resp.Header.Get("Content-Type"), "protobuf") {
		return fmt.Errorf("watch %s: answered in %s, not protobuf", path, resp.Header.Get("Content-Type"))
	}
	var frames frameCounter
	buf := make([]byte, 64<<10)
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			var ev int64
			if proto {
				ev = frames.feed(buf[:n])
			} else {
				ev = int64(bytes.Count(buf[:n], []byte{'\n'}))
			}
			w.bytes.Add(int64(n))
			w.events.Add(ev)
			res.bytes.Add(int64(n))
			res.events.Add(ev)
		}
		if err != nil {
			if err == io.EOF {
				return nil
			}
			return err
		}
	}
}

// frameCounter counts the frames of a length-delimited stream (a 4-byte
// big-endian length, then that many bytes), fed in pieces of any size.
type frameCounter struct {
	header [4]byte
	have   int    // bytes of the current header read
	left   uint32 // bytes of the current frame's body still to skip
}

func (f *frameCounter) feed(b []byte) int64 {
	var frames int64
	for len(b) > 0 {
		if f.left > 0 {
			n := min(uint32(len(b)), f.left)
			f.left -= n
			b = b[n:]
			continue
		}
		n := copy(f.header[f.have:], b)
		f.have += n
		b = b[n:]
		if f.have == 4 {
			f.have = 0
			f.left = uint32(f.header[0])<<24 | uint32(f.header[1])<<16 | uint32(f.header[2])<<8 | uint32(f.header[3])
			frames++
		}
	}
	return frames
}
