package scale

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vcoil/vcoil/v2/e2e/lab/bench"
)

// Context is what the machine was doing while a figure was taken: on two
// busy cores a latency may measure the machine rather than vcoil, so
// every figure carries the CPU idle share and the apiserver's answer time
// of the same interval.
type Context struct {
	CPUIdlePct float64 `json:"cpu_idle_pct"`
	// APILatencyMS are the p50 and p99 of a small GET (one Namespace) sent
	// every 500 ms.
	APILatencyP50MS float64 `json:"api_latency_p50_ms"`
	APILatencyP99MS float64 `json:"api_latency_p99_ms"`
}

// sampler measures Context over intervals.
type sampler struct {
	cl     client.Client
	mu     sync.Mutex
	lat    []time.Duration
	idle0  cpuTimes
	cancel context.CancelFunc
	done   chan struct{}
}

type cpuTimes struct{ idle, total uint64 }

func readCPU() (cpuTimes, error) {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return cpuTimes{}, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 || fields[0] != "cpu" {
			continue
		}
		var t cpuTimes
		for i, v := range fields[1:] {
			n, _ := strconv.ParseUint(v, 10, 64)
			t.total += n
			if i == 3 || i == 4 { // idle, iowait
				t.idle += n
			}
		}
		return t, nil
	}
	return cpuTimes{}, fmt.Errorf("/proc/stat has no cpu line")
}

// startSampler begins an interval.
func startSampler(ctx context.Context, cl client.Client) *sampler {
	ctx, cancel := context.WithCancel(ctx)
	s := &sampler{cl: cl, cancel: cancel, done: make(chan struct{})}
	s.idle0, _ = readCPU()
	go func() {
		defer close(s.done)
		t := time.NewTicker(500 * time.Millisecond)
		defer t.Stop()
		for {
			start := time.Now()
			err := cl.Get(ctx, client.ObjectKey{Name: "default"}, &corev1.Namespace{})
			if err == nil {
				s.mu.Lock()
				s.lat = append(s.lat, time.Since(start))
				s.mu.Unlock()
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return s
}

// stop ends the interval and returns its context.
func (s *sampler) stop() Context {
	s.cancel()
	<-s.done
	now, _ := readCPU()
	var c Context
	if d := now.total - s.idle0.total; d > 0 {
		c.CPUIdlePct = 100 * float64(now.idle-s.idle0.idle) / float64(d)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.lat) > 0 {
		slices.Sort(s.lat)
		c.APILatencyP50MS = percentileMS(s.lat, 50)
		c.APILatencyP99MS = percentileMS(s.lat, 99)
	}
	return c
}

// usage is a process's CPU and memory between two readings.
type usage struct {
	pid   int
	start bench.Usage
	at    time.Time
}

func startUsage(pid int) (*usage, error) {
	u, err := bench.ReadUsage(pid)
	if err != nil {
		return nil, fmt.Errorf("process %d: %w", pid, err)
	}
	return &usage{pid: pid, start: u, at: time.Now()}, nil
}

// since returns the process's CPU share of one core since start, its RSS
// and peak RSS now.
func (u *usage) since() (cpuPct, rssMB, hwmMB float64, err error) {
	now, err := bench.ReadUsage(u.pid)
	if err != nil {
		return 0, 0, 0, fmt.Errorf("process %d: %w", u.pid, err)
	}
	wall := time.Since(u.at)
	cpuPct = 100 * float64(now.CPU-u.start.CPU) / float64(wall)
	return cpuPct, float64(now.RSS) / (1 << 20), float64(now.HWM) / (1 << 20), nil
}

// findAll returns the live processes whose command name is comm (the
// kernel keeps its first 15 bytes).
func findAll(comm string) []int {
	comm = comm[:min(len(comm), 15)]
	var pids []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		c, err := os.ReadFile("/proc/" + e.Name() + "/comm")
		if err != nil || strings.TrimSpace(string(c)) != comm {
			continue
		}
		st, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// The state follows the command's closing parenthesis.
		s := string(st)
		if i := strings.LastIndexByte(s, ')'); i > 0 && i+2 < len(s) && (s[i+2] == 'Z' || s[i+2] == 'X') {
			continue
		}
		pids = append(pids, pid)
	}
	return pids
}

// cpuTracker follows the CPU time of every process of one command name
// over an interval, including processes that start or die during it: it
// reads them every second and keeps each one's last reading.
type cpuTracker struct {
	comm   string
	mu     sync.Mutex
	first  map[int]time.Duration
	last   map[int]time.Duration
	rss    float64
	start  time.Time
	cancel context.CancelFunc
	done   chan struct{}
}

func trackCPU(ctx context.Context, comm string) *cpuTracker {
	ctx, cancel := context.WithCancel(ctx)
	t := &cpuTracker{comm: comm, first: map[int]time.Duration{}, last: map[int]time.Duration{}, start: time.Now(), cancel: cancel, done: make(chan struct{})}
	t.read(true)
	go func() {
		defer close(t.done)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				t.read(false)
			}
		}
	}()
	return t
}

func (t *cpuTracker) read(initial bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, pid := range findAll(t.comm) {
		u, err := bench.ReadUsage(pid)
		if err != nil {
			continue
		}
		if _, ok := t.first[pid]; !ok {
			// A process that started during the interval counts whole.
			if initial {
				t.first[pid] = u.CPU
			} else {
				t.first[pid] = 0
			}
		}
		t.last[pid] = u.CPU
		t.rss = max(t.rss, float64(u.RSS)/(1<<20))
	}
}

// stop ends the interval: the processes' CPU share of one core over it,
// and the largest RSS seen.
func (t *cpuTracker) stop() (cpuPct, rssMB float64) {
	t.read(false)
	t.cancel()
	<-t.done
	t.mu.Lock()
	defer t.mu.Unlock()
	var cpu time.Duration
	for pid, last := range t.last {
		cpu += last - t.first[pid]
	}
	return 100 * float64(cpu) / float64(time.Since(t.start)), t.rss
}
