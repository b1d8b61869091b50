// Package policy is the root of vcoil's NetworkPolicy stack, which follows the
// Contiv/VPP policy design (docs/background.md#contiv-vpp-network-policies). Data flows
// one way through its layers, each a plain Go type in its own package:
//
//	informers -> cache.Feed -> cache.Cache         Pods, Namespaces, NetworkPolicies
//	          -> processor.Processor               which local pods changed; policies in vcoil's model
//	          -> configurator.Configurator         GenerateRules: 6-tuple rules per pod and direction
//	          -> renderer.Renderer (one per stack) receives renderer.Txn
//	             using renderer/acl/tables.Cache   CombineRules, BuildGlobalTable, shared tables, changes
//
// This package holds no code of its own, only the tests that run the layers
// together: the property test against the Kubernetes semantics (package
// internal/policyoracle), the examples of the Kubernetes documentation, and
// the benchmarks.
// See docs/policy.md.
package policy
