package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/go-kit/log"
	"github.com/go-kit/log/level"

	"github.com/fabric-exporter/fabric_exporter/collector"
)

// runDumpACS is the dump-acs command: the ACS registers of the PCI bridges
// into out (collector/pcie_acs_file.go), once or every interval until
// SIGTERM or SIGINT.
func runDumpACS(sysfs, out string, every time.Duration, logger log.Logger) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	for {
		b, err := collector.DumpPCIACS(sysfs, time.Now())
		if err == nil {
			err = collector.WriteFileAtomic(out, b)
		}
		if err != nil {
			level.Error(logger).Log("msg", "cannot write the ACS registers", "file", out, "err", err)
			if every == 0 {
				return 1
			}
		} else if every == 0 {
			level.Info(logger).Log("msg", "wrote the ACS registers", "file", out)
			return 0
		}
		select {
		case <-ctx.Done():
			return 0
		case <-time.After(every):
		}
	}
}
