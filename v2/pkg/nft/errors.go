package nft

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"syscall"

	"sigs.k8s.io/knftables"
)

// Error is a failed nft command or transaction, naming the table and, when
// nft said which, the statement it failed on. nft writes
//
//	/dev/stdin:12:1-40: Error: Could not process rule: No such file or directory
//	add element inet vcoil-services svc4 { ... }
//	^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
//
// and this becomes "nftables table inet vcoil-services: line 12: add
// element inet vcoil-services svc4 { ... }: Could not process rule: No such
// file or directory".
type Error struct {
	// Table is the table ("inet vcoil-services").
	Table string
	// Line is the script's line nft failed on, 0 when it did not say.
	Line int
	// Statement is that line, shortened (maxStatement).
	Statement string
	// Message is nft's error ("Could not process rule: No such file or
	// directory"), or the error's text when nft said nothing.
	Message string
	// Errno is the system error nft reported, 0 when none was recognised.
	Errno syscall.Errno
	// Err is the error nft's run returned (knftables' error included).
	Err error
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("nftables table ")
	b.WriteString(e.Table)
	if e.Line > 0 {
		b.WriteString(": line ")
		b.WriteString(strconv.Itoa(e.Line))
	}
	if e.Statement != "" {
		b.WriteString(": ")
		b.WriteString(e.Statement)
	}
	b.WriteString(": ")
	b.WriteString(e.Message)
	return b.String()
}

func (e *Error) Unwrap() error { return e.Err }

// Is matches the system error nft reported (syscall.ENOENT, and through it
// fs.ErrNotExist).
func (e *Error) Is(target error) bool {
	return e.Errno != 0 && (target == e.Errno || e.Errno.Is(target))
}

// IsNotFound is true for an error that says an object (table, chain, set,
// element) does not exist, whether nft, knftables, the Fake or netlink
// said it.
func IsNotFound(err error) bool {
	return knftables.IsNotFound(err) || errors.Is(err, syscall.ENOENT)
}

// IsAlreadyExists is true for an error that says an object exists.
func IsAlreadyExists(err error) bool {
	return knftables.IsAlreadyExists(err) || errors.Is(err, syscall.EEXIST)
}

// maxStatement bounds the statement in an error: an element command may
// hold a thousand elements.
const maxStatement = 160

// nftLocation is the start of nft's error line: "/dev/stdin:12:1-40: ".
var nftLocation = regexp.MustCompile(`^(?:/dev/stdin|-|[^:\s]*):(\d+):[0-9-]+: `)

// errnos are the system errors nft reports, by their text.
var errnos = []syscall.Errno{syscall.ENOENT, syscall.EEXIST, syscall.EBUSY, syscall.EINVAL,
	syscall.EOPNOTSUPP, syscall.ENOSPC, syscall.EPERM, syscall.ENOMEM, syscall.E2BIG, syscall.ELOOP,
	syscall.ENFILE, syscall.EMLINK, syscall.ERANGE, syscall.EACCES}

// newError makes err, the failure of nft on table, an *Error. stderr is
// nft's standard error (taken from err when empty, as knftables puts it
// there); script, when known, supplies the statement nft did not repeat.
func newError(table, script, stderr string, err error) *Error {
	if stderr == "" && err != nil {
		stderr = err.Error()
	}
	e := &Error{Table: table, Err: err}
	lines := strings.Split(strings.TrimSpace(stderr), "\n")
	e.Message = strings.TrimSpace(lines[0])
	for i, line := range lines {
		m := nftLocation.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		e.Line, _ = strconv.Atoi(m[1])
		e.Message = strings.TrimPrefix(line[len(m[0]):], "Error: ")
		// nft repeats the statement under its location, then carets.
		if i+1 < len(lines) && !isCarets(lines[i+1]) && !nftLocation.MatchString(lines[i+1]) {
			e.Statement = lines[i+1]
		} else if s := strings.Split(script, "\n"); e.Line > 0 && e.Line <= len(s) {
			e.Statement = s[e.Line-1]
		}
		break
	}
	if e.Line == 0 {
		// "Error: No such file or directory" without a location (a
		// listing), still followed by the command; or another failure.
		if strings.HasPrefix(e.Message, "Error: ") && len(lines) > 1 && !isCarets(lines[1]) {
			e.Statement = lines[1]
		}
		e.Message = strings.TrimPrefix(e.Message, "Error: ")
		if e.Message == "" && err != nil {
			e.Message = err.Error()
		}
	}
	e.Statement = shorten(strings.TrimSpace(e.Statement))
	for _, n := range errnos {
		if strings.Contains(strings.ToLower(e.Message), n.Error()) {
			e.Errno = n
			break
		}
	}
	return e
}

func isCarets(s string) bool {
	s = strings.TrimSpace(s)
	return s != "" && strings.Trim(s, "^~ ") == ""
}

// shorten keeps the start and the end of a long statement, where the
// command and the last element are.
func shorten(s string) string {
	if len(s) <= maxStatement {
		return s
	}
	head, tail := s[:maxStatement*3/4], s[len(s)-maxStatement/4:]
	return fmt.Sprintf("%s ...(%d bytes)... %s", head, len(s)-len(head)-len(tail), tail)
}
