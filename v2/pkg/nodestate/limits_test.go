package nodestate

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
)

// gauge counts the collections in a source at once, and the most seen.
type gauge struct {
	now, most atomic.Int32
}

func (g *gauge) enter() {
	n := g.now.Add(1)
	for {
		m := g.most.Load()
		if n <= m || g.most.CompareAndSwap(m, n) {
			return
		}
	}
}

func (g *gauge) leave() { g.now.Add(-1) }

// get asks h for the state as the peer remote would ("ip:port").
func get(h http.Handler, remote string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodGet, Path, nil)
	r.RemoteAddr = remote
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// One client (one peer address, whatever its ports) is served one request
// at a time: while its first collection runs, its other requests are
// refused with 429 at once, without collecting.
func TestOneClientIsServedOneRequestAtATime(t *testing.T) {
	var g gauge
	release := make(chan struct{})
	entered := make(chan struct{}, 100)
	srv, err := NewServer(ServerConfig{Node: "node1", Log: testr.New(t), Sources: []Named{{Name: "slow", Source: SourceFunc(func(ctx context.Context, _ *State) error {
		g.enter()
		defer g.leave()
		entered <- struct{}{}
		<-release
		return nil
	})}}})
	if err != nil {
		t.Fatal(err)
	}
	h := srv.Handler()
	const n = 50
	codes := make(chan int, n)
	go func() { codes <- get(h, "127.0.0.1:40000").Code }()
	<-entered
	var wg sync.WaitGroup
	for i := 1; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := get(h, fmt.Sprintf("127.0.0.1:%d", 40000+i))
			if w.Code == http.StatusTooManyRequests && w.Header().Get("Retry-After") == "" {
				t.Error("a 429 without Retry-After")
			}
			codes <- w.Code
		}()
	}
	wg.Wait()
	close(release)
	count := map[int]int{}
	for i := 0; i < n; i++ {
		count[<-codes]++
	}
	if count[http.StatusOK] != 1 || count[http.StatusTooManyRequests] != n-1 {
		t.Fatalf("answers %v, want one 200 and %d 429", count, n-1)
	}
	if m := g.most.Load(); m != 1 {
		t.Fatalf("%d collections at once for one client, want 1", m)
	}
}

// However many clients ask, no more than MaxInFlight collections run.
func TestCollectionsAreCappedOverall(t *testing.T) {
	var g gauge
	release := make(chan struct{})
	entered := make(chan struct{}, 100)
	srv, err := NewServer(ServerConfig{Node: "node1", MaxInFlight: 2, Log: testr.New(t), Sources: []Named{{Name: "slow", Source: SourceFunc(func(ctx context.Context, _ *State) error {
		g.enter()
		defer g.leave()
		entered <- struct{}{}
		<-release
		return nil
	})}}})
	if err != nil {
		t.Fatal(err)
	}
	h := srv.Handler()
	codes := make(chan int, 10)
	for i := 1; i <= 2; i++ {
		go func() { codes <- get(h, fmt.Sprintf("127.0.0.%d:1", i)).Code }()
		<-entered
	}
	for i := 3; i <= 10; i++ {
		if c := get(h, fmt.Sprintf("127.0.0.%d:1", i)).Code; c != http.StatusTooManyRequests {
			t.Errorf("client %d while two collections run: %d, want 429", i, c)
		}
	}
	close(release)
	for i := 0; i < 2; i++ {
		if c := <-codes; c != http.StatusOK {
			t.Errorf("a running collection answered %d", c)
		}
	}
	if m := g.most.Load(); m != 2 {
		t.Fatalf("%d collections at once, want 2", m)
	}
	// Once they are done, a client is served again.
	if c := get(h, "127.0.0.1:2").Code; c != http.StatusOK {
		t.Fatalf("after the collections: %d", c)
	}
}

// A flood of requests from a hostNetwork pod (bounded: 300 requests from
// 30 connections) does not crowd the lock a part of vcoild syncs under:
// the node state's sources read the parts' state under their locks, and
// each sync of the part meets at most MaxInFlight collections there.
func TestAFloodDoesNotCrowdTheSyncs(t *testing.T) {
	var (
		mu       sync.Mutex // the part's lock, as a renderer's
		contend  atomic.Int32
		worst    atomic.Int32
		syncs    atomic.Int32
		flooding atomic.Bool
	)
	part := SourceFunc(func(ctx context.Context, s *State) error {
		contend.Add(1)
		mu.Lock()
		for k := 0; k < 100; k++ {
			runtime.Gosched() // reading the part's state takes a while
		}
		mu.Unlock()
		contend.Add(-1)
		return nil
	})
	srv, err := NewServer(ServerConfig{Node: "node1", Log: testr.New(t), Sources: []Named{{Name: "part", Source: part}}})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	defer hs.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	flooding.Store(true)
	syncDone := make(chan struct{})
	go func() {
		defer close(syncDone)
		// The part's syncs, as long as the flood lasts.
		for flooding.Load() && ctx.Err() == nil {
			if c := contend.Load(); c > worst.Load() {
				worst.Store(c)
			}
			mu.Lock()
			syncs.Add(1)
			mu.Unlock()
		}
	}()
	var wg sync.WaitGroup
	var answered, refused atomic.Int32
	for i := 0; i < 30; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := &http.Client{Transport: &http.Transport{}}
			for j := 0; j < 10 && ctx.Err() == nil; j++ {
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, hs.URL+Path, nil)
				resp, err := c.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				resp.Body.Close()
				switch resp.StatusCode {
				case http.StatusOK:
					answered.Add(1)
				case http.StatusTooManyRequests:
					refused.Add(1)
				default:
					t.Errorf("answer %d", resp.StatusCode)
				}
			}
		}()
	}
	wg.Wait()
	flooding.Store(false)
	<-syncDone
	// How many are refused depends on the scheduling; some are served.
	if answered.Load() == 0 {
		t.Errorf("%d answered, %d refused: want some answered", answered.Load(), refused.Load())
	}
	if w := worst.Load(); w > int32(DefaultMaxInFlight) {
		t.Fatalf("a sync met %d collections at its lock, want at most %d", w, DefaultMaxInFlight)
	}
	if syncs.Load() == 0 {
		t.Fatal("no sync ran during the flood")
	}
}

// A State larger than MaxResponseBytes is refused whole, not cut off.
func TestAnOversizedStateIsRefused(t *testing.T) {
	srv, err := NewServer(ServerConfig{Node: "node1", MaxResponseBytes: 1024, Log: testr.New(t), Sources: []Named{{Name: "big", Source: SourceFunc(func(_ context.Context, s *State) error {
		for i := 0; i < 100; i++ {
			s.Errors = append(s.Errors, strings.Repeat("x", 100))
		}
		return nil
	})}}})
	if err != nil {
		t.Fatal(err)
	}
	w := get(srv.Handler(), "127.0.0.1:1")
	if w.Code != http.StatusInternalServerError || !strings.Contains(w.Body.String(), "1024") || strings.Contains(w.Body.String(), "xxxx") {
		t.Fatalf("answer %d: %.200s", w.Code, w.Body.String())
	}
}
