// Command prometheusrule writes v2/config/monitoring/prometheusrule.yaml
// from the rules file (make generate runs it from the repository's root).
package main

import (
	"fmt"
	"os"

	"github.com/vcoil/vcoil/v2/config/monitoring"
)

func main() {
	out, err := monitoring.PrometheusRule(monitoring.Rules)
	if err == nil {
		err = os.WriteFile(monitoring.PrometheusRuleFile, out, 0o644)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "prometheusrule:", err)
		os.Exit(1)
	}
}
