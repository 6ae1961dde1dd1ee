//go:build !windows

package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

// runService runs body until SIGTERM (systemd, launchd) or SIGINT (a terminal) and lets it
// finish its last flush.
func runService(_ string, body func(ctx context.Context) error) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	return body(ctx)
}
