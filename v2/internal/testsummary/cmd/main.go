// Command testsummary prints, at the end of make test, the tests that did
// not run and why (package testsummary), ending with the plain count line.
//
//	testsummary [--e2e-results results.json] GO-TEST-JSON...
//
// A file that does not exist is a run that did not happen, and is said so.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"

	"github.com/vcoil/vcoil/v2/internal/testsummary"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "testsummary:", err)
		os.Exit(1)
	}
}

func run() error {
	module := flag.String("module", "github.com/vcoil/vcoil", "module path cut from package names")
	e2eResults := flag.String("e2e-results", "", "the e2e suite's results.json")
	flag.Parse()

	var streams []io.Reader
	for _, name := range flag.Args() {
		f, err := os.Open(name)
		if errors.Is(err, fs.ErrNotExist) {
			fmt.Printf("    %s is missing: those Go tests did not run\n", name)
			continue
		}
		if err != nil {
			return err
		}
		defer f.Close()
		streams = append(streams, f)
	}
	g, err := testsummary.ReadGoTests(*module, streams...)
	if err != nil {
		return err
	}
	var rows []testsummary.E2ERow
	read := false
	if *e2eResults != "" {
		data, err := os.ReadFile(*e2eResults)
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			return err
		default:
			if err := json.Unmarshal(data, &rows); err != nil {
				return fmt.Errorf("%s: %w", *e2eResults, err)
			}
			read = true
		}
	}
	testsummary.Write(os.Stdout, g, rows, read)
	return nil
}
