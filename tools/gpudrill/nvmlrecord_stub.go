//go:build !cgo || nogpu

package main

import (
	"errors"
	"os"
	"time"
)

func recordNVML(*os.File, time.Duration, string) error {
	return errors.New("built without NVML (CGO_ENABLED=0 or -tags nogpu)")
}
