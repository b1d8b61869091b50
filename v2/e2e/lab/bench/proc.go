package bench

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vcoil/vcoil/v2/e2e/lab/procstat"
)

// clockTicks is the unit of /proc/PID/stat's times (USER_HZ, 100 on Linux).
const clockTicks = 100

// Usage is what a proxy process has used so far.
type Usage struct {
	// RSS and HWM (peak RSS) in bytes, from /proc/PID/status.
	RSS, HWM int64
	// CPU is the process's user plus system time, ChildCPU that of the
	// children it waited for (both proxies run the nft binary for every
	// transaction), from /proc/PID/stat.
	CPU, ChildCPU time.Duration
}

// statFields returns the fields of /proc/PID/stat after the command name
// (field 3, the state, first), at least up to the start time.
func statFields(pid int) ([]string, error) {
	f, err := procstat.Fields(pid)
	if err != nil {
		return nil, err
	}
	if len(f) < 20 {
		return nil, fmt.Errorf("process %d: short stat", pid)
	}
	return f, nil
}

// StartTime is when the process started, as wall-clock time: its start in
// clock ticks since boot set against CLOCK_BOOTTIME now (10 ms resolution;
// /proc/stat's btime has whole seconds only).
func StartTime(pid int) (time.Time, error) {
	f, err := statFields(pid)
	if err != nil {
		return time.Time{}, err
	}
	ticks, err := strconv.ParseInt(f[19], 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("process %d: start time: %w", pid, err)
	}
	var ts unix.Timespec
	now := time.Now()
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		return time.Time{}, err
	}
	sinceStart := time.Duration(ts.Nano()) - time.Duration(ticks)*time.Second/clockTicks
	return now.Add(-sinceStart), nil
}

// ReadUsage reads the process's memory and CPU time.
func ReadUsage(pid int) (Usage, error) {
	var u Usage
	f, err := statFields(pid)
	if err != nil {
		return u, err
	}
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	cutime, _ := strconv.ParseInt(f[13], 10, 64)
	cstime, _ := strconv.ParseInt(f[14], 10, 64)
	u.CPU = time.Duration(utime+stime) * time.Second / clockTicks
	u.ChildCPU = time.Duration(cutime+cstime) * time.Second / clockTicks
	st, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return u, err
	}
	defer st.Close()
	sc := bufio.NewScanner(st)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		switch k {
		case "VmRSS":
			u.RSS = kb << 10
		case "VmHWM":
			u.HWM = kb << 10
		}
	}
	return u, sc.Err()
}

// FindProcess returns the PID of the live process whose command name is
// comm and which runs in the network namespace at netnsPath (vcoild is a
// hostNetwork pod: its node's namespace).
func FindProcess(comm, netnsPath string) (int, error) {
	var want syscall.Stat_t
	if err := syscall.Stat(netnsPath, &want); err != nil {
		return 0, err
	}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		c, err := os.ReadFile(filepath.Join("/proc", e.Name(), "comm"))
		if err != nil || strings.TrimSpace(string(c)) != comm {
			continue
		}
		var st syscall.Stat_t
		if err := syscall.Stat(filepath.Join("/proc", e.Name(), "ns", "net"), &st); err != nil || st.Ino != want.Ino {
			continue
		}
		if f, err := statFields(pid); err == nil && f[0] != "Z" && f[0] != "X" {
			return pid, nil
		}
	}
	return 0, fmt.Errorf("no process %s in %s", comm, netnsPath)
}
