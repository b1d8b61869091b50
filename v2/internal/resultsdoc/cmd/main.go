// Command resultsdoc writes the result tables of the end-to-end suite's
// latest run into a document (package resultsdoc); make e2e-docs runs it on
// the lab's report and docs/e2e.md.
//
//	resultsdoc --results _out/lab/e2e/results.md --doc docs/e2e.md --command "make test"
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/vcoil/vcoil/v2/internal/resultsdoc"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "resultsdoc:", err)
		os.Exit(1)
	}
}

func run() error {
	results := flag.String("results", "_out/lab/e2e/results.md", "the e2e suite's results.md")
	doc := flag.String("doc", "docs/e2e.md", "the document whose results block is rewritten")
	command := flag.String("command", "make test", "the command that ran the suite, written into the block")
	flag.Parse()

	data, err := os.ReadFile(*results)
	if err != nil {
		return fmt.Errorf("read the suite's report (run the suite first): %w", err)
	}
	r, err := resultsdoc.Parse(data)
	if err != nil {
		return fmt.Errorf("%s: %w", *results, err)
	}
	text, err := os.ReadFile(*doc)
	if err != nil {
		return err
	}
	out, err := resultsdoc.Rewrite(text, func(level int) string {
		return resultsdoc.Block(r, level, *results, *command)
	})
	if err != nil {
		return fmt.Errorf("%s: %w", *doc, err)
	}
	info, err := os.Stat(*doc)
	if err != nil {
		return err
	}
	if err := os.WriteFile(*doc, out, info.Mode().Perm()); err != nil {
		return err
	}
	fmt.Printf("%s: results of %s (%s) written\n", *doc, *results, r.When.UTC().Format("2006-01-02 15:04 UTC"))
	return nil
}
