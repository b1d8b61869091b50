// Package cnpconformance runs the upstream conformance profile
// ClusterNetworkPolicy of sigs.k8s.io/network-policy-api (its test suite,
// from the Go module proxy at the version go.mod pins) against the lab:
// make e2e-cnp builds this package's test binary and runs it inside the
// lab (docs/e2e.md, "ClusterNetworkPolicy conformance").
//
// The driver is the upstream harness's own (flags, suite, report) with one
// change to what it creates: the suite's base pods run `agnhost porter` to
// serve SCTP ports, and porter exits when the kernel has no SCTP, as this
// machine's has not, so that no base pod would become Ready. The client the
// suite creates objects through replaces each such container's command by
// `/agnhost pause`, which keeps the container running and serves nothing;
// every other container (the TCP and UDP servers, the clients) is created
// as the manifest says. The tests that probe SCTP then fail at their SCTP
// probes; the report names them.
package cnpconformance
