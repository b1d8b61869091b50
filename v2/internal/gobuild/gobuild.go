// Package gobuild builds Go programs for tests that run them as processes:
// vcoild and vcoil-controller, the vcoil CNI binary, the reference CNI
// plugins. Each set of packages is built once per test binary, with the go
// command that `go test` puts first on PATH, into a directory of this
// process that the next test binary removes once this one has exited.
//
// It builds main packages of this module and of its dependencies, by import
// path; it does not cross-compile and does not pass build flags.
package gobuild

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// dirPrefix starts the name of every test binary's build directory in the
// temporary directory; the process ID follows.
const dirPrefix = "vcoil-gobuild-"

var (
	mu     sync.Mutex
	builds = map[string]*build{}
	root   struct {
		once sync.Once
		dir  string
		err  error
	}
)

type build struct {
	once sync.Once
	dir  string
	err  error
}

// Dir builds the main packages pkgs (import paths) into one directory and
// returns it: each binary is named as `go build` names it, after the last
// element of its import path, so that the directory can serve as a CNI
// runtime's plugin path. Later calls with the same packages, from any test
// of the test binary, return the same directory without building again.
// A failed build fails the test with the go command's output.
func Dir(tb testing.TB, pkgs ...string) string {
	tb.Helper()
	if len(pkgs) == 0 {
		tb.Fatal("gobuild: no package to build")
	}
	key := strings.Join(pkgs, " ")
	mu.Lock()
	b := builds[key]
	if b == nil {
		b = &build{}
		builds[key] = b
	}
	mu.Unlock()
	b.once.Do(func() { b.dir, b.err = buildInto(pkgs) })
	if b.err != nil {
		tb.Fatal(b.err)
	}
	return b.dir
}

// Program builds the main package pkg (an import path) once per test binary
// and returns its binary's path.
func Program(tb testing.TB, pkg string) string {
	tb.Helper()
	return filepath.Join(Dir(tb, pkg), path.Base(pkg))
}

// goTool is the go command: the one `go test` puts first on PATH, so that
// tests build with the toolchain that built them.
func goTool() (string, error) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("find the go command (go test puts it on PATH): %w", err)
	}
	return goTool, nil
}

func buildInto(pkgs []string) (string, error) {
	what := strings.Join(pkgs, ", ")
	goTool, err := goTool()
	if err != nil {
		return "", fmt.Errorf("build %s: %w", what, err)
	}
	parent, err := processDir()
	if err != nil {
		return "", fmt.Errorf("build %s: %w", what, err)
	}
	dir, err := os.MkdirTemp(parent, "build-")
	if err != nil {
		return "", fmt.Errorf("build %s: %w", what, err)
	}
	// With -o naming a directory, go build writes one binary per package.
	out, err := exec.Command(goTool, append([]string{"build", "-o", dir + string(filepath.Separator)}, pkgs...)...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("build %s: %w\n%s", what, err, out)
	}
	return dir, nil
}

// processDir is this test binary's directory for builds. Creating it removes
// the directories of test binaries that have exited.
func processDir() (string, error) {
	root.once.Do(func() {
		removeExited()
		root.dir = filepath.Join(os.TempDir(), dirPrefix+strconv.Itoa(os.Getpid()))
		root.err = os.MkdirAll(root.dir, 0o700)
	})
	return root.dir, root.err
}

// removeExited removes the build directories of processes that no longer
// exist. A directory whose process ID was reused stays until that process
// exits too.
func removeExited() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), dirPrefix+"*"))
	for _, d := range dirs {
		pid, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(d), dirPrefix))
		if err != nil || pid == os.Getpid() {
			continue
		}
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			_ = os.RemoveAll(d)
		}
	}
}
