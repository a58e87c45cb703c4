package collector

import (
	"fmt"
	"os"
	"sync/atomic"

	"github.com/go-kit/log"
	"github.com/go-kit/log/level"
	"google.golang.org/grpc/grpclog"
)

// gRPC's own log lines (connection attempts, transport errors) go to the
// kubernetes collector's go-kit logger at debug level instead of gRPC's
// default stderr logger: the outcome of every call is already the
// collector's state. The logger is installed at init, before any gRPC use,
// as grpclog.SetLoggerV2 requires; the collector sets its target.
var grpcTarget atomic.Pointer[log.Logger]

func init() { grpclog.SetLoggerV2(grpcLogger{}) }

type grpcLogger struct{}

func (grpcLogger) log(severity string, msg string) {
	if l := grpcTarget.Load(); l != nil {
		level.Debug(*l).Log("msg", msg, "source", "grpc", "severity", severity)
	}
}

func (g grpcLogger) Info(args ...any)                 { g.log("info", fmt.Sprint(args...)) }
func (g grpcLogger) Infoln(args ...any)               { g.log("info", fmt.Sprint(args...)) }
func (g grpcLogger) Infof(format string, args ...any) { g.log("info", fmt.Sprintf(format, args...)) }
func (g grpcLogger) Warning(args ...any)              { g.log("warning", fmt.Sprint(args...)) }
func (g grpcLogger) Warningln(args ...any)            { g.log("warning", fmt.Sprint(args...)) }
func (g grpcLogger) Warningf(format string, args ...any) {
	g.log("warning", fmt.Sprintf(format, args...))
}
func (g grpcLogger) Error(args ...any)                 { g.log("error", fmt.Sprint(args...)) }
func (g grpcLogger) Errorln(args ...any)               { g.log("error", fmt.Sprint(args...)) }
func (g grpcLogger) Errorf(format string, args ...any) { g.log("error", fmt.Sprintf(format, args...)) }
func (g grpcLogger) Fatal(args ...any)                 { g.fatal(fmt.Sprint(args...)) }
func (g grpcLogger) Fatalln(args ...any)               { g.fatal(fmt.Sprint(args...)) }
func (g grpcLogger) Fatalf(format string, args ...any) { g.fatal(fmt.Sprintf(format, args...)) }
func (grpcLogger) V(l int) bool                        { return grpcTarget.Load() != nil }

func (grpcLogger) fatal(msg string) {
	if l := grpcTarget.Load(); l != nil {
		level.Error(*l).Log("msg", msg, "source", "grpc")
	}
	os.Exit(1)
}
