package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// floodEnv carries a flood child's orders: the bench runs plane A's load
// in a process of its own, as another tenant's clients would be. In the
// bench's own process, B's client would queue behind A's response
// decoding in the same Go scheduler, which measures the load generator,
// not the server.
const floodEnv = "KPLANE_BENCH_FLOOD"

type floodOrders struct {
	Host    string `json:"host"`
	Token   string `json:"token"`
	CA      []byte `json:"ca"`
	Writers int    `json:"writers"`
	Listers int    `json:"listers"`
}

// runFloodChild runs when the bench is started as a flood child: it floods
// until its standard input ends, and answers each line read there with
// the number of requests completed so far.
func runFloodChild(orders string) {
	var o floodOrders
	if err := json.Unmarshal([]byte(orders), &o); err != nil {
		fail(fmt.Errorf("flood child: %w", err))
	}
	c, err := kubernetes.NewForConfig(&rest.Config{Host: o.Host, BearerToken: o.Token,
		TLSClientConfig: rest.TLSClientConfig{CAData: o.CA}, QPS: -1, Timeout: 60 * time.Second})
	if err != nil {
		fail(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	var done atomic.Int64
	var wg sync.WaitGroup
	flood(ctx, &wg, c, noisyParams{Writers: o.Writers, Listers: o.Listers}, &done)
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		fmt.Println(done.Load())
	}
	stop()
	wg.Wait()
}

// floodProcess is a running flood child.
type floodProcess struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Scanner

	stopOnce sync.Once
	stopErr  error
}

func startFlood(s *server, plane string, p noisyParams) (*floodProcess, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cfg := s.config(plane)
	orders, err := json.Marshal(floodOrders{Host: cfg.Host, Token: cfg.BearerToken, CA: cfg.CAData, Writers: p.Writers, Listers: p.Listers})
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), floodEnv+"="+string(orders))
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting the flood: %w", err)
	}
	return &floodProcess{cmd: cmd, in: in, out: bufio.NewScanner(out)}, nil
}

// completed asks the child how many requests it completed.
func (f *floodProcess) completed() (int64, error) {
	if _, err := io.WriteString(f.in, "\n"); err != nil {
		return 0, err
	}
	if !f.out.Scan() {
		return 0, fmt.Errorf("the flood process ended: %v", f.out.Err())
	}
	return strconv.ParseInt(strings.TrimSpace(f.out.Text()), 10, 64)
}

// running waits until the flood completed as many requests as it has
// loops: every loop is under way, the server saturated.
func (f *floodProcess) running(loops int) error {
	return wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 2*time.Minute, true,
		func(context.Context) (bool, error) {
			n, err := f.completed()
			return n >= int64(loops), err
		})
}

// stop ends the flood and waits for the child; it may be called again.
func (f *floodProcess) stop() error {
	f.stopOnce.Do(func() {
		_ = f.in.Close()
		f.stopErr = f.cmd.Wait()
	})
	return f.stopErr
}
