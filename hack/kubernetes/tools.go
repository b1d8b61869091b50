//go:build tools

// Package kubernetes records the programs this module builds so that go mod tidy
// keeps their dependencies.
package kubernetes

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
)
