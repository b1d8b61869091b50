// Command conformance helps make e2e-conformance run the upstream Kubernetes
// network e2e tests against the lab (docs/e2e.md):
//
//	conformance images --rootfs DIR --agnhost FILE ... --out images.tar
//	conformance report --json-report ginkgo.json --focus RE --skip RE --out-dir DIR
//	conformance cnp-report --report report.yaml --log test.log --out FILE
//
// `images` writes the images the tests use, under the names the e2e
// framework expects, as one docker-archive tarball for the lab's
// LAB_EXTRA_IMAGES. `report` writes the summary of a run (summary.json,
// summary.md) and exits 1 when a Conformance spec did not pass (or, with
// --strict, any spec in scope). `cnp-report` summarizes a run of the
// ClusterNetworkPolicy conformance profile (make e2e-cnp) and exits 1 when
// a test failed otherwise than at SCTP probes.
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/vcoil/vcoil/v2/e2e/conformance/cnpreport"
	"github.com/vcoil/vcoil/v2/e2e/conformance/report"
	"github.com/vcoil/vcoil/v2/e2e/images/imageset"
)

func main() {
	root := &cobra.Command{
		Use:           "conformance",
		Short:         "images and reports for the upstream network e2e tests against the lab",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(imagesCommand(), reportCommand(), cnpReportCommand())
	if err := root.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "conformance:", err)
		os.Exit(1)
	}
}

func imagesCommand() *cobra.Command {
	var in imageInputs
	var out string
	cmd := &cobra.Command{
		Use:   "images",
		Short: "write the e2e tests' images as one docker-archive tarball",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			work, err := os.MkdirTemp(filepath.Dir(out), ".layers-")
			if err != nil {
				return err
			}
			defer os.RemoveAll(work)
			in.WorkDir = work
			images, err := buildImages(in, func(s string) { fmt.Fprintln(os.Stderr, "    "+s) })
			if err != nil {
				return err
			}
			if err := imageset.WriteArchiveFile(out, images); err != nil {
				return err
			}
			for _, img := range images {
				for _, t := range img.Tags {
					fmt.Println(t)
				}
			}
			return nil
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&out, "out", "", "tarball to write")
	fs.StringVar(&in.RootFS, "rootfs", "", "Debian root file system (make conformance-rootfs)")
	fs.StringVar(&in.Agnhost, "agnhost", "", "agnhost binary")
	fs.StringVar(&in.CoreDNS, "coredns", "", "CoreDNS binary (with the hosts and log plugins), /coredns in agnhost's image")
	fs.StringVar(&in.Pause, "pause", "", "pause binary")
	fs.StringVar(&in.Regression, "regression-issue-74839", "", "regression-issue-74839 binary")
	fs.StringVar(&in.PorterCert, "porter-cert", "", "agnhost porter's localhost.crt")
	fs.StringVar(&in.PorterKey, "porter-key", "", "agnhost porter's localhost.key")
	for _, f := range []string{"out", "rootfs", "agnhost", "coredns", "pause", "regression-issue-74839", "porter-cert", "porter-key"} {
		_ = cmd.MarkFlagRequired(f)
	}
	return cmd
}

func reportCommand() *cobra.Command {
	var jsonReport, focus, skip, outDir string
	var strict bool
	cmd := &cobra.Command{
		Use:   "report",
		Short: "summarise a run: summary.json and summary.md; exit 1 when a Conformance spec did not pass",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			f, err := os.Open(jsonReport)
			if err != nil {
				return err
			}
			defer f.Close()
			sum, err := report.Build(f, focus, skip)
			if err != nil {
				return err
			}
			data, err := json.MarshalIndent(sum, "", "  ")
			if err != nil {
				return err
			}
			if err := os.WriteFile(filepath.Join(outDir, "summary.json"), append(data, '\n'), 0o644); err != nil {
				return err
			}
			md, err := os.Create(filepath.Join(outDir, "summary.md"))
			if err != nil {
				return err
			}
			if err := sum.WriteMarkdown(md); err != nil {
				md.Close()
				return err
			}
			if err := md.Close(); err != nil {
				return err
			}
			fmt.Printf("Conformance: %d passed, %d failed, %d skipped\n", sum.Conformance.Passed, sum.Conformance.Failed, sum.Conformance.Skipped)
			if len(sum.DualStack.Specs) > 0 {
				fmt.Printf("[Feature:IPv6DualStack]: %d passed, %d failed, %d skipped (%d more left out by the skip)\n",
					sum.DualStack.Passed, sum.DualStack.Failed, sum.DualStack.Skipped, sum.DualStackLeftOut)
			}
			fmt.Printf("other sig-network: %d passed, %d failed, %d skipped\n", sum.Other.Passed, sum.Other.Failed, sum.Other.Skipped)
			fmt.Printf("summary: %s\n", filepath.Join(outDir, "summary.md"))
			switch {
			case !sum.ConformancePassed():
				return errors.New("not every Conformance spec passed")
			case strict && !sum.AllPassed():
				return errors.New("a spec in scope failed (--strict)")
			}
			return nil
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&jsonReport, "json-report", "", "ginkgo's JSON report of the run")
	fs.StringVar(&focus, "focus", "", "the run's focus regular expression")
	fs.StringVar(&skip, "skip", "", "the run's skip regular expression")
	fs.StringVar(&outDir, "out-dir", "", "directory for summary.json and summary.md")
	fs.BoolVar(&strict, "strict", false, "exit 1 when any spec in scope failed, not only a Conformance one")
	for _, f := range []string{"json-report", "focus", "skip", "out-dir"} {
		_ = cmd.MarkFlagRequired(f)
	}
	return cmd
}

func cnpReportCommand() *cobra.Command {
	var reportFile, logFile, out string
	cmd := &cobra.Command{
		Use:   "cnp-report",
		Short: "summarise a ClusterNetworkPolicy conformance run; exit 1 when a test failed otherwise than at SCTP probes",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			r, err := os.Open(reportFile)
			if err != nil {
				return err
			}
			defer r.Close()
			l, err := os.Open(logFile)
			if err != nil {
				return err
			}
			defer l.Close()
			sum, err := cnpreport.Read(r, l)
			if err != nil {
				return err
			}
			md := sum.Markdown()
			if err := os.WriteFile(out, []byte(md), 0o644); err != nil {
				return err
			}
			fmt.Print(md)
			if other := sum.Other(); len(other) > 0 {
				return fmt.Errorf("%d tests failed otherwise than at SCTP probes: %v", len(other), other)
			}
			return nil
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&reportFile, "report", "", "the suite's report (--report-output)")
	fs.StringVar(&logFile, "log", "", "the test binary's -test.v output")
	fs.StringVar(&out, "out", "", "the summary to write (Markdown)")
	for _, f := range []string{"report", "log", "out"} {
		_ = cmd.MarkFlagRequired(f)
	}
	return cmd
}
