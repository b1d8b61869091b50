//go:build tools

// Package etcd records the program this module builds so that go mod tidy keeps
// its dependencies.
package etcd

import _ "go.etcd.io/etcd/server/v3"
