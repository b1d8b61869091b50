package scale

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// Record is one figure of the report.
type Record struct {
	Phase  string  `json:"phase"`
	Metric string  `json:"metric"`
	Value  float64 `json:"value"`
	Unit   string  `json:"unit,omitempty"`
	// Count is how many samples (or objects) the figure is over.
	Count int `json:"count,omitempty"`
	// Target is the goal, if it sets one, and Met whether the
	// figure meets it.
	Target string `json:"target,omitempty"`
	Met    bool   `json:"met,omitempty"`
	Status string `json:"status"`
	Detail string `json:"detail,omitempty"`
	// Samples are the single measurements (ms), in order.
	Samples []float64 `json:"samples_ms,omitempty"`
	Context
}

// Phases of the report.
const (
	PhaseCluster    = "cluster"
	PhaseController = "vcoil-controller"
	PhaseNode       = "vcoild"
	PhaseAPIServer  = "apiserver"
)

// Statuses of a record.
const (
	StatusOK     = "ok"
	StatusFailed = "failed"
)

// WriteJSONLines writes one JSON object per record.
func WriteJSONLines(w io.Writer, recs []Record) error {
	enc := json.NewEncoder(w)
	for _, r := range recs {
		if err := enc.Encode(r); err != nil {
			return err
		}
	}
	return nil
}

// Markdown renders the records as a table: each figure beside its target
// and the machine's state while it was taken.
func Markdown(o Options, recs []Record) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Simulated: %d nodes, %d pods, %d Services x %d endpoints, %d NetworkPolicies, churn %.0f events/s; measured node %s.\n\n",
		o.Nodes, o.Pods, o.Services, EndpointsPerService, o.Policies, o.ChurnRate, o.Node.Name)
	b.WriteString("| phase | figure | value | target | CPU idle | apiserver GET p50 / p99 | detail |\n|---|---|---|---|---|---|---|\n")
	for _, r := range recs {
		v := fmt.Sprintf("%.3g %s", r.Value, r.Unit)
		if r.Value >= 1000 {
			v = fmt.Sprintf("%.0f %s", r.Value, r.Unit)
		}
		if r.Status != StatusOK {
			v = "**" + r.Status + "**"
		}
		target := r.Target
		if target != "" && r.Status == StatusOK {
			if r.Met {
				target += " (met)"
			} else {
				target = "**" + target + " (missed)**"
			}
		}
		idle, lat := "", ""
		if r.CPUIdlePct > 0 || r.APILatencyP50MS > 0 {
			idle = fmt.Sprintf("%.0f %%", r.CPUIdlePct)
			lat = fmt.Sprintf("%.1f / %.1f ms", r.APILatencyP50MS, r.APILatencyP99MS)
		}
		detail := r.Detail
		if r.Count > 0 {
			detail = strings.TrimPrefix(fmt.Sprintf("%s; n=%d", detail, r.Count), "; ")
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s |\n", r.Phase, r.Metric, v, target, idle, lat, strings.ReplaceAll(detail, "|", "/"))
	}
	return b.String()
}
