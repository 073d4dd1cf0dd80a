package logging

import (
	"fmt"

	"github.com/sirupsen/logrus"
	"google.golang.org/grpc/grpclog"
)

// grpcLogger is gRPC's logger (the datastore clients and kine's server).
// Upstream's, set by the apiserver's etcd storage, hands gRPC's warnings
// to klog, which logs them as information: gRPC warns of every stream
// whose client went away, so each stop wrote a dozen "transport is
// closing" lines as the watch caches ended, and a datastore client
// reconnecting wrote a line a second that the apiserver reports better.
// Here gRPC's warnings are debug, its errors errors, and its information
// is written at klog -v 5 and above, as upstream's does.
type grpcLogger struct {
	logger    *logrus.Entry
	verbosity int
}

var _ grpclog.LoggerV2 = grpcLogger{}

func newGRPCLogger(logger *logrus.Logger, verbosity int) grpcLogger {
	return grpcLogger{logger: logger.WithField("logger", "grpc"), verbosity: verbosity}
}

func (g grpcLogger) Info(args ...any) {
	if g.V(5) {
		g.logger.Info(args...)
	}
}

func (g grpcLogger) Infoln(args ...any) { g.Info(fmt.Sprint(args...)) }

func (g grpcLogger) Infof(format string, args ...any) { g.Info(fmt.Sprintf(format, args...)) }

func (g grpcLogger) Warning(args ...any) { g.logger.Debug(args...) }

func (g grpcLogger) Warningln(args ...any) { g.Warning(fmt.Sprint(args...)) }

func (g grpcLogger) Warningf(format string, args ...any) { g.Warning(fmt.Sprintf(format, args...)) }

func (g grpcLogger) Error(args ...any) { g.logger.Error(args...) }

func (g grpcLogger) Errorln(args ...any) { g.Error(fmt.Sprint(args...)) }

func (g grpcLogger) Errorf(format string, args ...any) { g.Error(fmt.Sprintf(format, args...)) }

func (g grpcLogger) Fatal(args ...any) { g.logger.Fatal(args...) }

func (g grpcLogger) Fatalln(args ...any) { g.Fatal(fmt.Sprint(args...)) }

func (g grpcLogger) Fatalf(format string, args ...any) { g.Fatal(fmt.Sprintf(format, args...)) }

// V reports whether gRPC's information of verbosity l is written.
func (g grpcLogger) V(l int) bool { return l <= g.verbosity }
