package collector

import (
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"testing"

	"github.com/fabric-exporter/fabric_exporter/internal/netnsdial"
)

// A refused setns (no CAP_SYS_ADMIN) is "cannot enter"; an EPERM of the
// connect made inside the namespace (a netfilter rule dropping it) is a
// failed query with its own error, not hidden as a missing privilege.
func TestDeniedOnlyForEntering(t *testing.T) {
	connect := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.EPERM)}
	for _, c := range []struct {
		err          error
		denied, gone bool
	}{
		{&netnsdial.EnterError{Op: "setns", Err: syscall.EPERM}, true, false},
		{fmt.Errorf("ras: %w", &netnsdial.EnterError{Op: "open /proc/1/ns/net", Err: syscall.EACCES}), true, false},
		{&netnsdial.EnterError{Op: "open /proc/1/ns/net", Err: syscall.ENOENT}, false, true},
		{connect, false, false},
		{fmt.Errorf("ras: %w", connect), false, false},
		{errors.New("handshake: unexpected answer"), false, false},
	} {
		if got := denied(c.err); got != c.denied {
			t.Errorf("denied(%v) = %v", c.err, got)
		}
		if got := gone(c.err); got != c.gone {
			t.Errorf("gone(%v) = %v", c.err, got)
		}
	}
}
