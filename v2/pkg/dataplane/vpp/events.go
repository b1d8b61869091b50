package vpp

import (
	"fmt"
	"time"
)

// Reasons of the ConnectionEvents: vcoild records them as Kubernetes Events
// on its Node (docs/operations.md lists them with what to do).
const (
	// ReasonConnectionLost (Warning): the control ping on an established
	// API connection failed; CNI calls wait until VPP is back.
	ReasonConnectionLost = "VPPConnectionLost"
	// ReasonRestarted (Warning): a new incarnation after the first: VPP
	// restarted (another PID), or vcoild connected to it again. Everything
	// vcoil made in VPP is replayed.
	ReasonRestarted = "VPPRestarted"
	// ReasonResynced (Normal): the replay into a new incarnation after the
	// first is complete.
	ReasonResynced = "VPPResynced"
	// ReasonResyncFailed (Warning): a sync into VPP failed; the driver
	// retries with a backoff, and vcoild also records it when the network
	// policies could not be replayed.
	ReasonResyncFailed = "VPPResyncFailed"
)

// ConnectionEvent is something about the connection to VPP that an
// operator must see: vcoild records each as a Kubernetes Event on its Node.
type ConnectionEvent struct {
	// Warning: a Warning Event; else a Normal one.
	Warning bool
	// Reason is one of the Reason constants.
	Reason string
	// Note says what happened, naming VPP's PID and the incarnation.
	Note string
}

// connectionEventBuffer holds the events nobody has read yet; a full
// buffer drops new ones (each is also logged), since the supervision of
// VPP must never wait for a reader.
const connectionEventBuffer = 32

// ConnectionEvents returns the channel of the connection's events. It is
// meant for one reader.
func (d *driver) ConnectionEvents() <-chan ConnectionEvent { return d.events }

// emit queues an event without blocking.
func (d *driver) emit(e ConnectionEvent) {
	select {
	case d.events <- e:
	default:
		d.log.Info("dropped a connection event: nobody reads them", "reason", e.Reason, "note", e.Note)
	}
}

// connectionLost reports that the ping on an established connection to VPP
// failed. The caller holds d.mu.
func (d *driver) connectionLost(err error) {
	d.metrics.connected.Set(0)
	d.emit(ConnectionEvent{Warning: true, Reason: ReasonConnectionLost,
		Note: fmt.Sprintf("lost the API connection to VPP (pid %d) at %s: %v; CNI calls wait until it is back", d.pid, d.cfg.APISocket, err)})
}

// newIncarnation reports an incarnation after the first: VPP restarted
// (oldPid differs from pid) or vcoild connected again to the same VPP.
// The caller holds d.mu and has counted the incarnation.
func (d *driver) newIncarnation(oldPid, pid uint32) {
	d.lastSyncError = ""
	if d.incarnation <= 1 {
		return
	}
	d.metrics.restarts.Inc()
	what := fmt.Sprintf("VPP restarted (pid %d, was %d; incarnation %d)", pid, oldPid, d.incarnation)
	if oldPid == pid {
		what = fmt.Sprintf("vcoild connected again to VPP (pid %d; incarnation %d)", pid, d.incarnation)
	}
	d.emit(ConnectionEvent{Warning: true, Reason: ReasonRestarted,
		Note: fmt.Sprintf("%s; resyncing %d pods, then the services and network policies", what, len(d.pods))})
}

// syncDone reports a complete sync of the desired state into VPP. The
// caller holds d.mu.
func (d *driver) syncDone(pid uint32, took time.Duration) {
	d.lastSyncError = ""
	d.metrics.resyncDuration.Observe(took.Seconds())
	if d.incarnation <= 1 {
		return // vcoild's start, not a restart's replay
	}
	unwired := 0
	for _, st := range d.pods {
		if !st.wired {
			unwired++
		}
	}
	note := fmt.Sprintf("resynced VPP (pid %d, incarnation %d) in %s: %d pods, %d blocks", pid, d.incarnation, took.Round(time.Millisecond), len(d.pods), len(d.blocks))
	if unwired > 0 {
		note += fmt.Sprintf("; %d pods could not be wired and wait for their DEL (vcoild's log names them)", unwired)
	}
	d.emit(ConnectionEvent{Reason: ReasonResynced, Note: note})
}

// syncFailed reports a failed sync, once per distinct error in an
// incarnation: the driver retries every few seconds. The caller holds d.mu.
func (d *driver) syncFailed(pid uint32, err error) {
	note := fmt.Sprintf("sync with VPP (pid %d, incarnation %d) failed: %v; vcoild retries, and CNI calls wait meanwhile", pid, d.incarnation, err)
	if note == d.lastSyncError {
		return
	}
	d.lastSyncError = note
	d.emit(ConnectionEvent{Warning: true, Reason: ReasonResyncFailed, Note: note})
}
