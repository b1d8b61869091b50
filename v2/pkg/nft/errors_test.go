package nft

import (
	"errors"
	"io/fs"
	"os/exec"
	"strings"
	"syscall"
	"testing"
)

// Real texts of nft v1.0.6's standard error.
func TestErrorNamesTableLineAndStatement(t *testing.T) {
	long := "add element inet vcoil-services svc4 { " + strings.Repeat("10.0.0.1 . tcp . 80 : goto pick4-1, ", 40) + "10.0.0.2 . tcp . 80 : goto pick4-1 }"
	cases := []struct {
		name, stderr, script string
		want                 string
		line                 int
		errno                syscall.Errno
	}{{
		name: "missing element",
		stderr: "/dev/stdin:4:27-34: Error: Could not process rule: No such file or directory\n" +
			"delete element inet t s { 10.0.0.9 }\n" +
			"                          ^^^^^^^^\n",
		want: "nftables table inet t: line 4: delete element inet t s { 10.0.0.9 }: Could not process rule: No such file or directory",
		line: 4, errno: syscall.ENOENT,
	}, {
		name: "unresolvable address",
		stderr: "/dev/stdin:3:25-34: Error: Could not resolve hostname: Name or service not known\n" +
			"add element inet t s2 { 10.0.0.300 }\n" +
			"                        ^^^^^^^^^^\n",
		want: "nftables table inet t: line 3: add element inet t s2 { 10.0.0.300 }: Could not resolve hostname: Name or service not known",
		line: 3,
	}, {
		name: "did you mean",
		stderr: "/dev/stdin:3:21-22: Error: No such file or directory; did you mean chain ‘c’ in table inet ‘t’?\n" +
			"delete chain inet t c2\n" +
			"                    ^^\n",
		want: "nftables table inet t: line 3: delete chain inet t c2: No such file or directory; did you mean chain ‘c’ in table inet ‘t’?",
		line: 3, errno: syscall.ENOENT,
	}, {
		name: "listing without a location",
		stderr: "Error: No such file or directory\n" +
			"list table inet nosuch\n" +
			"                ^^^^^^\n",
		want:  "nftables table inet t: list table inet nosuch: No such file or directory",
		errno: syscall.ENOENT,
	}, {
		name:   "statement from the script",
		stderr: "/dev/stdin:2:1-4: Error: Could not process rule: File exists\n",
		script: "add table inet t\n" + long + "\n",
		line:   2, errno: syscall.EEXIST,
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cause := &exec.ExitError{}
			e := newError("inet t", c.script, c.stderr, cause)
			if c.want != "" && e.Error() != c.want {
				t.Errorf("got  %q\nwant %q", e.Error(), c.want)
			}
			if e.Line != c.line || e.Errno != c.errno {
				t.Errorf("line %d errno %v, want %d %v", e.Line, e.Errno, c.line, c.errno)
			}
			if c.script != "" {
				if len(e.Statement) > maxStatement+40 || !strings.HasPrefix(e.Statement, "add element inet vcoil-services svc4 {") ||
					!strings.HasSuffix(e.Statement, "10.0.0.2 . tcp . 80 : goto pick4-1 }") {
					t.Errorf("statement %q: want the long line's start and end", e.Statement)
				}
			}
			var ee *exec.ExitError
			if !errors.As(e, &ee) {
				t.Error("the cause is not reachable with errors.As")
			}
			if got := IsNotFound(e); got != (c.errno == syscall.ENOENT) {
				t.Errorf("IsNotFound %v", got)
			}
			if got := errors.Is(e, fs.ErrNotExist); got != (c.errno == syscall.ENOENT) {
				t.Errorf("errors.Is(fs.ErrNotExist) %v", got)
			}
		})
	}
}
