package etcd

import (
	"bytes"
	"io"
	"os"
	"sync"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// startLog holds the member's log lines until it is ready: a start that
// fails is then one line of kplane's (naming a file that keeps etcd's own
// lines), not etcd's errors about listeners it closes on the way out.
// Once released, lines go straight through.
type startLog struct {
	mu   sync.Mutex
	out  io.Writer
	held *bytes.Buffer
}

func newStartLog(out io.Writer) *startLog {
	return &startLog{out: out, held: &bytes.Buffer{}}
}

func (l *startLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.held != nil {
		return l.held.Write(p)
	}
	return l.out.Write(p)
}

func (l *startLog) Sync() error { return nil }

// release writes the held lines out and lets the next ones through.
func (l *startLog) release() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.held != nil {
		_, _ = l.out.Write(l.held.Bytes())
		l.held = nil
	}
}

// keep writes the held lines to path instead, and lets no more through.
func (l *startLog) keep(path string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	held := l.held
	l.held, l.out = nil, io.Discard
	if held == nil {
		return nil
	}
	return os.WriteFile(path, held.Bytes(), 0o600)
}

// mute drops every later line.
func (l *startLog) mute() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.held, l.out = nil, io.Discard
}

// logger is etcd's JSON logger at error level, writing to l.
func (l *startLog) logger() *zap.Logger {
	enc := zap.NewProductionEncoderConfig()
	enc.EncodeTime = zapcore.RFC3339NanoTimeEncoder
	core := zapcore.NewCore(zapcore.NewJSONEncoder(enc), zapcore.AddSync(l), zap.ErrorLevel)
	return zap.New(core, zap.AddCaller(), zap.ErrorOutput(zapcore.AddSync(l)))
}
