//go:build tools

// Package kueue pins the main of Kueue, the peer batch queue bench/bench_scale.py measures
// beside Kondor (built only by that benchmark, never by `make check`).
package kueue

import _ "sigs.k8s.io/kueue/cmd/kueue"
