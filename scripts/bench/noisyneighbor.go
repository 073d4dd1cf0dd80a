package main

import (
	"context"
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

type noisyParams struct {
	// Writers and Listers are plane A's concurrent write and LIST loops.
	Writers, Listers int
	// Ops is how many GETs and as many LISTs plane B makes in each phase.
	Ops int
	// Objects are the ConfigMaps in each plane before the phases.
	Objects int
	// Seats are further --plane-fairness-seats to measure (fair_<n>_*).
	Seats []int
}

// noisyNeighborScenario measures what one plane flooding the server does
// to another plane's latency, with and without the fair queue by plane,
// one server each in the same run: plane B's GET and LIST p50/p99 alone,
// then while plane A runs Writers write loops and Listers LIST loops.
func noisyNeighborScenario(binary string, p noisyParams) (Result, error) {
	figures := map[string]float64{}
	modes := []struct {
		name string
		args []string
	}{{"unfair", []string{"--plane-fairness=false"}}, {"fair", nil},
		{"fair_seats_only", []string{"--plane-fairness-cpus=0"}}}
	for _, n := range p.Seats {
		modes = append(modes, struct {
			name string
			args []string
		}{fmt.Sprintf("fair_%d", n), []string{fmt.Sprintf("--plane-fairness-seats=%d", n)}})
	}
	for _, mode := range modes {
		if err := noisyNeighborRun(binary, p, mode.name, mode.args, figures); err != nil {
			return Result{}, fmt.Errorf("%s: %w", mode.name, err)
		}
	}
	return Result{
		Scenario: "noisy-neighbor",
		Params: map[string]any{"writers": p.Writers, "listers": p.Listers, "ops": p.Ops, "objects": p.Objects, "datastore": "sqlite",
			"seats": p.Seats},
		Figures: figures,
		Notes: []string{
			"unfair_*: --plane-fairness=false (every request runs at once, bounded only by max-in-flight); fair_*: the default fair queue by plane (32 seats per CPU, the machine's CPUs shared among active planes); fair_seats_only_*: --plane-fairness-cpus=0 (seats only, no CPU share); fair_<n>_*: --plane-fairness-seats=<n>.",
			"b_get_* / b_list_*: plane B's GET of one ConfigMap and LIST of its namespace (objects ConfigMaps), one request at a time, alone then under plane A's flood.",
			"*_ratio: B's p99 under flood divided by its p99 alone (goal <= 2).",
			"a_ops_per_s: plane A's completed requests per second during the flood (429s retried by client-go count when they complete).",
			"Plane A's load generator runs in a process of its own (another tenant's clients), B's client in the bench; both on the same machine as the server, sharing its CPUs.",
		},
	}, nil
}

func noisyNeighborRun(binary string, p noisyParams, mode string, args []string, figures map[string]float64) error {
	s, err := startServer(binary, append([]string{"--simulation=false"}, args...)...)
	if err != nil {
		return err
	}
	defer s.stop()
	ctx := context.Background()
	a, err := separateClient(s, "noisy-a")
	if err != nil {
		return err
	}
	b, err := separateClient(s, "quiet-b")
	if err != nil {
		return err
	}
	for _, c := range []*kubernetes.Clientset{a, b} {
		for i := range p.Objects {
			if _, err := c.CoreV1().ConfigMaps("default").Create(ctx, benchConfigMap(fmt.Sprintf("cm-%d", i), i), metav1.CreateOptions{}); err != nil {
				return err
			}
		}
	}
	alone, err := quietReads(ctx, b, p.Ops)
	if err != nil {
		return fmt.Errorf("plane B alone: %w", err)
	}
	f, err := startFlood(s, "noisy-a", p)
	if err != nil {
		return err
	}
	defer f.stop()
	if err := f.running(p.Writers + p.Listers); err != nil {
		return fmt.Errorf("plane A's flood: %w", err)
	}
	began := time.Now()
	before, err := f.completed()
	if err != nil {
		return err
	}
	flooded, err := quietReads(ctx, b, p.Ops)
	if err != nil {
		return fmt.Errorf("plane B under flood: %w", err)
	}
	after, err := f.completed()
	if err != nil {
		return err
	}
	rate := float64(after-before) / time.Since(began).Seconds()
	if err := f.stop(); err != nil {
		return fmt.Errorf("plane A's flood: %w", err)
	}
	for verb, phases := range map[string][2][]time.Duration{"get": {alone.get, flooded.get}, "list": {alone.list, flooded.list}} {
		for i, phase := range []string{"alone", "flood"} {
			sort.Slice(phases[i], func(x, y int) bool { return phases[i][x] < phases[i][y] })
			figures[fmt.Sprintf("%s_b_%s_p50_%s_ms", mode, verb, phase)] = ms(percentile(phases[i], 0.50))
			figures[fmt.Sprintf("%s_b_%s_p99_%s_ms", mode, verb, phase)] = ms(percentile(phases[i], 0.99))
		}
		figures[fmt.Sprintf("%s_b_%s_p99_ratio", mode, verb)] = ms(percentile(phases[1], 0.99)) / ms(percentile(phases[0], 0.99))
	}
	figures[mode+"_a_ops_per_s"] = rate
	return nil
}

// separateClient is a clientset of plane with a connection of its own:
// client-go shares one HTTP/2 connection among configs with the same TLS
// settings, and B's requests must not queue behind A's in it.
func separateClient(s *server, plane string) (*kubernetes.Clientset, error) {
	cfg := s.config(plane)
	dialer := &net.Dialer{Timeout: 30 * time.Second}
	cfg.Dial = dialer.DialContext
	return kubernetes.NewForConfig(cfg)
}

type readLatencies struct{ get, list []time.Duration }

// quietReads makes ops GETs and ops LISTs in turn, one at a time.
func quietReads(ctx context.Context, c *kubernetes.Clientset, ops int) (readLatencies, error) {
	var out readLatencies
	for i := range ops {
		began := time.Now()
		if _, err := c.CoreV1().ConfigMaps("default").Get(ctx, fmt.Sprintf("cm-%d", i%10), metav1.GetOptions{}); err != nil {
			return out, err
		}
		out.get = append(out.get, time.Since(began))
		began = time.Now()
		if _, err := c.CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{}); err != nil {
			return out, err
		}
		out.list = append(out.list, time.Since(began))
	}
	return out, nil
}

// flood runs plane A's write and LIST loops until ctx ends, counting the
// requests that complete.
func flood(ctx context.Context, wg *sync.WaitGroup, c *kubernetes.Clientset, p noisyParams, done *atomic.Int64) {
	for w := range p.Writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("flood-%d-%d", w, i)},
					Data: map[string]string{"writer": fmt.Sprint(w)}}
				if _, err := c.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err == nil {
					done.Add(1)
				}
			}
		}()
	}
	for range p.Listers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				if _, err := c.CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{}); err == nil {
					done.Add(1)
				}
			}
		}()
	}
}

// intList is a flag of comma-separated integers.
type intList []int

func (l *intList) String() string { return fmt.Sprint([]int(*l)) }

func (l *intList) Set(v string) error {
	for _, f := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return err
		}
		*l = append(*l, n)
	}
	return nil
}
