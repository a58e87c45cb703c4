package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/go-kit/log"
	"github.com/go-kit/log/level"

	"github.com/fabric-exporter/fabric_exporter/internal/kmsg"
)

// runRelayKmsg is the relay-kmsg command: the kernel log, from now on,
// record by record into the FIFO out (internal/kmsg.Relay) for an
// exporter that may not open the device itself, until SIGTERM or SIGINT.
func runRelayKmsg(in, out string, logger log.Logger) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// A reader that goes away is an EPIPE to wait on, never a reason to
	// die (Go already answers EPIPE on descriptors other than 1 and 2).
	signal.Ignore(syscall.SIGPIPE)
	rl := &kmsg.Relay{Input: in, Output: out, Log: func(kv ...any) { level.Info(logger).Log(kv...) }}
	if err := rl.Run(ctx); err != nil {
		level.Error(logger).Log("msg", "cannot relay the kernel log", "input", in, "output", out, "err", err)
		return 1
	}
	return 0
}
