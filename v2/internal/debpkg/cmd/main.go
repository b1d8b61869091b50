// Command debpkg installs the Debian packages of hack/debian-packages that
// are missing or of a version the list does not accept, and checks that the
// archive still offers a version of each (make deps, lab-deps,
// conformance-deps and check-debian-pins).
//
//	debpkg install GROUP...          install what the groups need, as root
//	debpkg check-archive [GROUP...]  fail naming every package the archive cannot satisfy
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strings"

	"github.com/vcoil/vcoil/v2/internal/debpkg"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "debpkg:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("debpkg", flag.ContinueOnError)
	list := fs.String("list", "hack/debian-packages", "the package list")
	update := fs.Bool("update", false, "check-archive: run apt-get update first, so that the archive's current versions are asked")
	if len(args) == 0 {
		return errors.New("usage: debpkg install GROUP... | debpkg check-archive [--update] [GROUP...]")
	}
	verb := args[0]
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	f, err := os.Open(*list)
	if err != nil {
		return err
	}
	reqs, err := debpkg.Parse(f)
	f.Close()
	if err != nil {
		return fmt.Errorf("%s: %w", *list, err)
	}
	reqs = debpkg.InGroups(reqs, fs.Args()...)
	if len(reqs) == 0 {
		return fmt.Errorf("%s lists no package of the groups %v", *list, fs.Args())
	}
	switch verb {
	case "install":
		if len(fs.Args()) == 0 {
			return errors.New("install: name the groups to install")
		}
		return install(reqs)
	case "check-archive":
		if *update {
			if err := aptGetUpdate(); err != nil {
				return err
			}
		}
		if err := debpkg.CheckArchive(reqs, madison); err != nil {
			return fmt.Errorf("stale pins in %s (update them there):\n%w", *list, err)
		}
		fmt.Printf("the archive offers a matching version of each of the %d packages of %s\n", len(reqs), *list)
		return nil
	}
	return fmt.Errorf("unknown verb %q: want install or check-archive", verb)
}

// install installs, for each requirement that the installed package does not
// meet, the archive's newest version that meets it, then checks again.
func install(reqs []debpkg.Requirement) error {
	var missing []debpkg.Requirement
	for _, r := range reqs {
		if v, ok := installed(r.Name); !ok || !r.Satisfied(v) {
			missing = append(missing, r)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	if err := aptGetUpdate(); err != nil {
		return err
	}
	var pkgs []string
	var errs []error
	for _, r := range missing {
		cs, err := madison(r.Name)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		v, ok := debpkg.Pick(r, cs)
		if !ok {
			errs = append(errs, debpkg.NotInArchive(r, cs))
			continue
		}
		pkgs = append(pkgs, r.Name+"="+v)
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "==> installing %s from Debian\n", strings.Join(pkgs, " "))
	cmd := exec.Command("apt-get", append([]string{"install", "-y", "-qq", "--no-install-recommends", "--allow-downgrades"}, pkgs...)...)
	cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("apt-get install %s: %w\n%s", strings.Join(pkgs, " "), err, out)
	}
	for _, r := range missing {
		v, ok := installed(r.Name)
		if !ok {
			v = "none"
		}
		if !ok || !r.Satisfied(v) {
			errs = append(errs, fmt.Errorf("package %s: installed %s, wanted %s", r.Name, v, r.Want()))
		}
	}
	return errors.Join(errs...)
}

// installed returns the version of a package that dpkg has installed.
func installed(name string) (string, bool) {
	out, err := exec.Command("dpkg-query", "-W", "-f=${db:Status-Status} ${Version}", name).Output()
	if err != nil {
		return "", false
	}
	status, version, _ := strings.Cut(string(out), " ")
	return version, status == "installed"
}

func aptGetUpdate() error {
	if out, err := exec.Command("apt-get", "update", "-qq").CombinedOutput(); err != nil {
		return fmt.Errorf("apt-get update: %w\n%s", err, out)
	}
	return nil
}

// madison asks the archive, not dpkg: apt-cache policy would also report a
// version that exists only in the local status file.
func madison(name string) ([]debpkg.Candidate, error) {
	out, err := exec.Command("apt-cache", "madison", name).Output()
	if err != nil {
		return nil, fmt.Errorf("apt-cache madison %s: %w", name, err)
	}
	return debpkg.ParseMadison(name, string(out)), nil
}
