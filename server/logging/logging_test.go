package logging

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"github.com/sirupsen/logrus"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/controller/util/consistency"
)

func newTestLogger(format string) (*logrus.Logger, *bytes.Buffer) {
	var buf bytes.Buffer
	l := logrus.New()
	l.SetOutput(&buf)
	f, err := NewFormatter(format)
	if err != nil {
		panic(err)
	}
	l.SetFormatter(f)
	return l, &buf
}

type unencodable struct{ C chan int }

// Every line klog hands over becomes one JSON object, whatever the values
// of its key/value pairs are.
func TestSinkWritesJSON(t *testing.T) {
	l, buf := newTestLogger("json")
	log := logr.New(&sink{logger: l}).WithName("cacher").WithValues("resource", "pods")
	log.Info("watch started", "plane", "team-a", "obj", klog.KRef("ns", "name"), "ch", unencodable{C: make(chan int)}, "odd")
	log.V(2).Info("verbose")
	log.Error(errors.New("boom"), "failed", "count", 3)
	var nilRef *klog.ObjectRef
	log.Info("nil stringer", "ref", nilRef)

	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 4 {
		t.Fatalf("want 4 lines, got %d:\n%s", len(lines), buf.String())
	}
	var entries []map[string]any
	for _, line := range lines {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("not JSON: %q: %v", line, err)
		}
		entries = append(entries, m)
	}
	first := entries[0]
	for k, want := range map[string]any{"msg": "watch started", "level": "info", "logger": "cacher", "resource": "pods",
		"plane": "team-a", "odd": "(missing value)"} {
		if first[k] != want {
			t.Errorf("%s = %v, want %v (line %v)", k, first[k], want, first)
		}
	}
	if obj, _ := first["obj"].(map[string]any); obj["name"] != "name" || obj["namespace"] != "ns" {
		t.Errorf("obj = %v, want its namespace and name", first["obj"])
	}
	if entries[1]["v"] != float64(2) {
		t.Errorf("verbose line has v=%v", entries[1]["v"])
	}
	if entries[2]["level"] != "error" || entries[2]["error"] != "boom" || entries[2]["count"] != float64(3) {
		t.Errorf("error line: %v", entries[2])
	}
}

func TestNewFormatterRejectsUnknown(t *testing.T) {
	if _, err := NewFormatter("yaml"); err == nil || !strings.Contains(err.Error(), "--log-format") {
		t.Fatalf("want a --log-format error, got %v", err)
	}
}

// gRPC's warnings (a stream whose client went away) are debug, its errors
// errors, and its information only at -v 5 and above.
func TestGRPCLogger(t *testing.T) {
	l, buf := newTestLogger("json")
	l.SetLevel(logrus.InfoLevel)
	g := newGRPCLogger(l, 0)
	g.Infof("[core] channel %d created", 1)
	g.Warningf("[core] grpc: Server.processRPC failed to write status: %s", "transport is closing")
	g.Errorf("[core] grpc: %s", "broken")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 1 || !strings.Contains(lines[0], `"level":"error"`) || !strings.Contains(lines[0], "broken") ||
		!strings.Contains(lines[0], `"logger":"grpc"`) {
		t.Fatalf("at info and -v 0, want the error only; got:\n%s", buf.String())
	}
	buf.Reset()
	l.SetLevel(logrus.DebugLevel)
	newGRPCLogger(l, 5).Infof("[core] channel %d created", 2)
	g.Warning("transport is closing")
	if out := buf.String(); !strings.Contains(out, "channel 2 created") || !strings.Contains(out, `"level":"debug"`) {
		t.Fatalf("at debug and -v 5, want the information and the warning; got:\n%s", out)
	}
}

// A ReplicaSet sync given up because the controller's informer lags its
// own write is requeued by the controller: debug, not an error.
func TestConsistencyRequeuesAreDebug(t *testing.T) {
	l, buf := newTestLogger("json")
	l.SetLevel(logrus.InfoLevel)
	log := logr.New(&sink{logger: l}).WithName("UnhandledError")
	behind := &consistency.ConsistencyError{ReadRV: "5", WroteRV: "7",
		GroupResource: schema.GroupResource{Group: "apps", Resource: "replicasets"}}
	// As the ReplicaSet controller's processNextWorkItem wraps it.
	log.Error(fmt.Errorf("sync %q failed with %v", "p|default/web-1", behind), "Unhandled Error")
	if out := buf.String(); out != "" {
		t.Fatalf("at info, a requeued sync was logged:\n%s", out)
	}
	log.Error(errors.New("sync \"p|default/web-1\" failed with boom"), "Unhandled Error")
	if out := buf.String(); !strings.Contains(out, `"level":"error"`) {
		t.Fatalf("another sync error was not logged as an error:\n%s", out)
	}
	l.SetLevel(logrus.DebugLevel)
	buf.Reset()
	log.Error(fmt.Errorf("sync %q failed with %v", "p|default/web-1", behind), "Unhandled Error")
	if out := buf.String(); !strings.Contains(out, `"level":"debug"`) || !strings.Contains(out, "not as new as written") {
		t.Fatalf("at debug, want the requeued sync; got:\n%s", out)
	}
}
