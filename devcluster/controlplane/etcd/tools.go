//go:build tools

// Package etcd pins the main of the etcd server the development cluster builds.
package etcd

import _ "go.etcd.io/etcd/server/v3"
