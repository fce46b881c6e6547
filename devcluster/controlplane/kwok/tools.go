//go:build tools

// Package kwok pins the main of kwok, the kubelet simulator of the development cluster's nodes.
package kwok

import _ "sigs.k8s.io/kwok/cmd/kwok"
