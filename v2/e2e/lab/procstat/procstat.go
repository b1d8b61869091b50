// Package procstat reads /proc/PID/stat for the lab's process bookkeeping
// (cluster) and the services benchmark (bench).
package procstat

import (
	"fmt"
	"os"
	"strings"
)

// Fields returns the fields of /proc/PID/stat after the command name, the
// state (stat's third field) first. The command name may hold spaces and
// parentheses, so the fields start after its last ')'.
func Fields(pid int) ([]string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil, fmt.Errorf("process %d: bad stat %q", pid, s)
	}
	return strings.Fields(s[i+1:]), nil
}
