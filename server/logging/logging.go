package logging

import (
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"strconv"
	"strings"

	"github.com/go-logr/logr"
	"github.com/sirupsen/logrus"
	"google.golang.org/grpc/grpclog"
	"k8s.io/klog/v2"
)

// Formats are the values of --log-format.
var Formats = []string{"text", "json"}

// Options are the logging flags of `kplane server`.
type Options struct {
	// Level is logrus's level: debug, info, warn or error.
	Level string
	// Format is text or json.
	Format string
	// Verbosity is klog's -v for the Kubernetes components.
	Verbosity int
}

// Setup configures logrus and routes klog and the standard library's log
// package through it. It is meant to be called once, before the server
// starts.
func Setup(o Options) error {
	level, err := logrus.ParseLevel(o.Level)
	if err != nil {
		return fmt.Errorf("--log-level %q: %w", o.Level, err)
	}
	formatter, err := NewFormatter(o.Format)
	if err != nil {
		return err
	}
	logrus.SetLevel(level)
	logrus.SetFormatter(formatter)

	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	if err := fs.Set("v", strconv.Itoa(o.Verbosity)); err != nil {
		return fmt.Errorf("-v %d: %w", o.Verbosity, err)
	}
	// klog checks its own verbosity and then hands every line to the sink.
	klog.SetLogger(logr.New(&sink{logger: logrus.StandardLogger()}))
	log.SetFlags(0)
	log.SetOutput(logrus.StandardLogger().WriterLevel(logrus.InfoLevel))
	// Before any gRPC client or server exists, as gRPC requires.
	grpclog.SetLoggerV2(newGRPCLogger(logrus.StandardLogger(), o.Verbosity))
	return nil
}

// timestampFormat is RFC 3339 with milliseconds: start-up and shutdown
// steps are a few to a few hundred milliseconds apart, and a log in whole
// seconds cannot tell which of them took the time.
const timestampFormat = "2006-01-02T15:04:05.000Z07:00"

// NewFormatter returns the logrus formatter for a --log-format value.
func NewFormatter(format string) (logrus.Formatter, error) {
	switch format {
	case "", "text":
		return &logrus.TextFormatter{FullTimestamp: true, TimestampFormat: timestampFormat}, nil
	case "json":
		return &logrus.JSONFormatter{TimestampFormat: timestampFormat}, nil
	}
	return nil, fmt.Errorf("--log-format %q: want text or json", format)
}

// sink is a logr.LogSink writing to logrus. klog has already applied -v
// when it calls Info, so every call is written at logrus's info level (or
// error), with the key/value pairs as fields and the klog verbosity of the
// call in "v" when it is above 0.
type sink struct {
	logger *logrus.Logger
	name   string
	values []any
}

func (s *sink) Init(logr.RuntimeInfo) {}

func (s *sink) Enabled(int) bool { return true }

func (s *sink) Info(level int, msg string, kv ...any) {
	entry := s.entry(kv)
	if level > 0 {
		entry = entry.WithField("v", level)
	}
	entry.Info(msg)
}

func (s *sink) Error(err error, msg string, kv ...any) {
	entry := s.entry(kv)
	if err != nil {
		entry = entry.WithField(logrus.ErrorKey, err.Error())
	}
	if retriedWhenCaughtUp(err) {
		entry.Debug(msg)
		return
	}
	entry.Error(msg)
}

// consistencyErrorText is what upstream's ConsistencyError says
// (k8s.io/kubernetes/pkg/controller/util/consistency): a controller's
// informer has not yet seen the controller's own last write.
const consistencyErrorText = "is not as new as written version"

// retriedWhenCaughtUp reports a sync that upstream's ReplicaSet controller
// gave up because its informer lags its own write: it requeues the sync
// and counts it (replicaset_controller_requeue_skips), yet logs it as an
// unhandled error, hundreds a minute while planes are reset under load.
// The controller wraps the error as text, so the text is what is matched.
func retriedWhenCaughtUp(err error) bool {
	return err != nil && strings.Contains(err.Error(), consistencyErrorText)
}

func (s *sink) WithValues(kv ...any) logr.LogSink {
	c := *s
	c.values = append(append([]any(nil), s.values...), kv...)
	return &c
}

func (s *sink) WithName(name string) logr.LogSink {
	c := *s
	if c.name != "" {
		name = c.name + "." + name
	}
	c.name = name
	return &c
}

func (s *sink) entry(kv []any) *logrus.Entry {
	fields := logrus.Fields{}
	if s.name != "" {
		fields["logger"] = s.name
	}
	addFields(fields, s.values)
	addFields(fields, kv)
	return s.logger.WithFields(fields)
}

// addFields turns logr key/value pairs into logrus fields whose values
// every formatter can write: a value the JSON formatter could not encode
// would make logrus drop the whole line.
func addFields(fields logrus.Fields, kv []any) {
	for i := 0; i < len(kv); i += 2 {
		key, ok := kv[i].(string)
		if !ok {
			key = fmt.Sprint(kv[i])
		}
		if i+1 == len(kv) {
			fields[key] = "(missing value)"
			break
		}
		fields[key] = fieldValue(kv[i+1])
	}
}

func fieldValue(v any) (out any) {
	// A String or MarshalLog method may panic (a nil receiver); a log line
	// must never take the server down.
	defer func() {
		if r := recover(); r != nil {
			out = fmt.Sprintf("(panic formatting %T: %v)", v, r)
		}
	}()
	if m, ok := v.(logr.Marshaler); ok {
		v = m.MarshalLog()
	}
	switch x := v.(type) {
	case nil, string, bool, int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64, float32, float64:
		return x
	case error:
		return x.Error()
	case fmt.Stringer:
		return x.String()
	}
	if _, err := json.Marshal(v); err != nil {
		return fmt.Sprintf("%+v", v)
	}
	return v
}
