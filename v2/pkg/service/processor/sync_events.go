package processor

import (
	"errors"
	"fmt"

	"github.com/vcoil/vcoil/v2/pkg/dataplane"
)

// reportSyncFailure records a renderer's failure on the Node. The note
// holds the renderer's own error, without the counts the processor adds
// for the log, so that a renderer failing the same way at every retry is
// reported once (nodeevents.Recorder.Failed). A dataplane that is not
// ready (VPP restarting) is left to the dataplane's own Events.
func (p *Processor) reportSyncFailure(err error) {
	if errors.Is(err, dataplane.ErrNotReady) {
		return
	}
	cause := err
	if u := errors.Unwrap(err); u != nil {
		cause = u
	}
	p.nodeEvents.Failed(ReasonServiceSyncFailed, "Sync", fmt.Sprintf(
		"Services are not rendered into this node's dataplane as the API has them: %v; vcoild retries with a backoff and resyncs everything", cause))
}
