//go:build tools

// Package main pins the real nsqd and nsqlookupd commands in go.sum, so `go build` of them
// resolves the exact versions the interop tests run against.
package main

import (
	_ "github.com/nsqio/nsq/apps/nsqd"
	_ "github.com/nsqio/nsq/apps/nsqlookupd"
)
