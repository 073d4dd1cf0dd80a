package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

type streamsParams struct {
	Streams int // delta streams opened on one plane
	Users   int // identities they are spread over (Streams/Users each: the per-user limit)
	Objects int // objects in the plane, 10 kinds
	// ProfileDir, when set, receives heap profiles before and with the
	// streams open.
	ProfileDir string
}

// streamsScenario opens Streams snapshot delta streams of every resource of
// one plane (from a snapshot's resourceVersion, as clients do), spread over
// Users identities with the server's per-identity limit set to exactly
// their share, and measures what they cost the server: RSS and goroutines
// after a forced GC, before and with the streams open. Then a write to the
// plane must reach every stream (delivery latency), one more stream per
// identity must be refused with 429 at once, and closing the streams must
// give the goroutines back. A binary without stream limits (an older
// kplane) is measured the same way, without the limit.
func streamsScenario(binary string, p streamsParams) (Result, error) {
	if p.Users < 1 || p.Streams < p.Users {
		return Result{}, fmt.Errorf("want at least one stream per user: %d streams, %d users", p.Streams, p.Users)
	}
	perUser := p.Streams / p.Users
	limited := binaryHasFlag(binary, "snapshot-max-streams-per-user")
	var args []string
	if limited {
		args = append(args, "--snapshot-max-streams-per-user", strconv.Itoa(perUser))
	}
	s, err := startServer(binary, args...)
	if err != nil {
		return Result{}, err
	}
	defer s.stop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	const plane = "streams-target"
	rv, err := prepareStreamsPlane(ctx, s, plane, p.Objects)
	if err != nil {
		return Result{}, err
	}
	b := &streamBench{s: s, plane: plane, query: "resourceVersion=" + rv, client: s.streamClient()}
	if err := b.waitForAccess(ctx); err != nil {
		return Result{}, err
	}

	before, err := s.settledUsage()
	if err != nil {
		return Result{}, err
	}
	if err := profile(s, p.ProfileDir, "streams-before"); err != nil {
		return Result{}, err
	}
	began := time.Now()
	if err := b.open(ctx, p.Streams, p.Users); err != nil {
		b.closeAll()
		return Result{}, err
	}
	openTook := time.Since(began)
	var firstLine time.Duration
	opened := float64(len(b.streams))
	with, err := s.settledUsage()
	if err == nil {
		err = profile(s, p.ProfileDir, "streams-open")
	}
	if err != nil {
		b.closeAll()
		return Result{}, err
	}
	delivery, err := b.deliver(ctx)
	if err == nil {
		firstLine, err = b.firstLine(ctx)
	}
	if err != nil {
		b.closeAll()
		return Result{}, err
	}
	refused, refusalMax, retryAfter := b.probe(ctx, p.Users)
	b.closeAll()
	after, err := s.usageBackTo(before.goroutines)
	if err != nil {
		return Result{}, err
	}

	figures := map[string]float64{
		"streams_open":               opened,
		"open_all_seconds":           openTook.Seconds(),
		"rss_before_mib":             before.rss / (1 << 20),
		"rss_with_streams_mib":       with.rss / (1 << 20),
		"rss_delta_mib":              (with.rss - before.rss) / (1 << 20),
		"rss_per_stream_kib":         (with.rss - before.rss) / 1024 / opened,
		"goroutines_before":          before.goroutines,
		"goroutines_with_streams":    with.goroutines,
		"goroutines_delta":           with.goroutines - before.goroutines,
		"goroutines_per_stream":      (with.goroutines - before.goroutines) / opened,
		"goroutines_after_close":     after.goroutines,
		"heap_delta_mib":             (with.heap - before.heap) / (1 << 20),
		"stacks_delta_mib":           (with.stacks - before.stacks) / (1 << 20),
		"delivery_p50_ms":            ms(percentile(delivery, 0.50)),
		"delivery_p99_ms":            ms(percentile(delivery, 0.99)),
		"delivery_all_ms":            ms(delivery[len(delivery)-1]),
		"initial_first_line_ms":      ms(firstLine),
		"refused_past_limit":         float64(refused),
		"refusal_max_ms":             ms(refusalMax),
		"refusals_with_retry_after":  float64(retryAfter),
		"extra_streams_past_limit":   float64(p.Users),
		"per_user_limit":             float64(perUser),
		"server_limits_in_binary":    boolFigure(limited),
		"goal_rss_delta_mib_max":     40,
		"goal_goroutines_delta_max":  2000,
		"goal_met_rss_and_goroutine": boolFigure(with.rss-before.rss <= 40<<20 && with.goroutines-before.goroutines <= 2000),
	}
	notes := []string{
		"every stream covers every resource of the plane, from a snapshot's resourceVersion, one HTTP/1.1 connection each (TLS on loopback)",
		"RSS and goroutines are read after two forced GCs once the goroutine count has settled",
		"initial_first_line_ms: one more stream, without resourceVersion or timeoutSeconds, opened while the others are: until its first line (the state) arrives",
		"goal for 200 streams: RSS +40 MiB at most, goroutines +2,000 at most",
	}
	if !limited {
		notes = append(notes, "this binary has no --snapshot-max-streams-per-user: the extra streams are not refused")
	}
	return Result{
		Scenario: "streams",
		Params:   map[string]any{"streams": p.Streams, "users": p.Users, "objects": p.Objects},
		Figures:  figures,
		Notes:    notes,
	}, nil
}

func boolFigure(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// binaryHasFlag reports whether `binary server --help` lists flag.
func binaryHasFlag(binary, flag string) bool {
	out, _ := exec.Command(binary, "server", "--help").CombinedOutput()
	return strings.Contains(string(out), "--"+flag)
}

// prepareStreamsPlane fills plane, lets the group bench-streamers do
// anything in it, and returns the resourceVersion of its snapshot.
func prepareStreamsPlane(ctx context.Context, s *server, plane string, objects int) (string, error) {
	c, err := s.client(plane)
	if err != nil {
		return "", err
	}
	if err := fillSnapshotPlane(ctx, c, objects); err != nil {
		return "", fmt.Errorf("filling %s: %w", plane, err)
	}
	if _, err := c.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "bench-streamers"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects:   []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "Group", Name: "bench-streamers"}},
	}, metav1.CreateOptions{}); err != nil {
		return "", err
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.config(plane).Host+"/snapshot?warm=true", nil)
	req.Header.Set("Authorization", "Bearer "+s.token)
	resp, err := s.http().Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var snap struct {
		ResourceVersion string `json:"resourceVersion"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&snap); err != nil || resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("snapshot of %s: %s %v", plane, resp.Status, err)
	}
	return snap.ResourceVersion, nil
}

// usage is what the server holds.
type usage struct {
	rss        float64
	goroutines float64
	heap       float64 // Go heap in use
	stacks     float64 // goroutine stacks in use
}

// settledUsage reads RSS and goroutines after a forced GC, once the
// goroutine count has stopped moving (two reads 500 ms apart within 1%).
func (s *server) settledUsage() (usage, error) {
	var last float64 = -1
	deadline := time.Now().Add(20 * time.Second)
	for {
		g, err := s.metric("go_goroutines")
		if err != nil {
			return usage{}, err
		}
		if stable := last >= 0 && math.Abs(g-last) <= last/100; stable || time.Now().After(deadline) {
			break
		}
		last = g
		time.Sleep(500 * time.Millisecond)
	}
	if err := s.collectGarbage(); err != nil {
		return usage{}, err
	}
	rss, err := s.rssBytes()
	if err != nil {
		return usage{}, err
	}
	values, err := s.metrics("go_goroutines", "go_memstats_heap_inuse_bytes", "go_memstats_stack_inuse_bytes")
	return usage{rss: rss, goroutines: values["go_goroutines"], heap: values["go_memstats_heap_inuse_bytes"],
		stacks: values["go_memstats_stack_inuse_bytes"]}, err
}

// usageBackTo waits (up to 30 s) until the goroutines are back within 5%
// of baseline and reads the usage then.
func (s *server) usageBackTo(baseline float64) (usage, error) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		g, err := s.metric("go_goroutines")
		if err != nil {
			return usage{}, err
		}
		if g <= baseline*1.05 || time.Now().After(deadline) {
			return s.settledUsage()
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// streamClient keeps responses open as long as they last.
func (s *server) streamClient() *http.Client {
	c := s.http()
	c.Timeout = 0
	return c
}

// streamBench holds the open streams.
type streamBench struct {
	s      *server
	plane  string
	query  string
	client *http.Client

	mu      sync.Mutex
	streams []*benchStream
}

// benchStream is one open stream, read by its own goroutine.
type benchStream struct {
	cancel context.CancelFunc
	body   io.Closer
	// marker is closed once the stream has carried the marker object.
	marker chan struct{}
	at     time.Time
}

// request opens one stream as user; on anything but 200 it returns the
// status, Retry-After and how long the answer took.
func (b *streamBench) request(ctx context.Context, user string) (*benchStream, int, string, time.Duration, error) {
	ctx, cancel := context.WithCancel(ctx)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, b.s.config(b.plane).Host+"/snapshot?watch=true&"+b.query, nil)
	req.Header.Set("Authorization", "Bearer "+b.s.token)
	req.Header.Set("Impersonate-User", user)
	req.Header.Set("Impersonate-Group", "bench-streamers")
	began := time.Now()
	resp, err := b.client.Do(req)
	took := time.Since(began)
	if err != nil {
		cancel()
		return nil, 0, "", took, err
	}
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		cancel()
		return nil, resp.StatusCode, resp.Header.Get("Retry-After"), took, nil
	}
	st := &benchStream{cancel: cancel, body: resp.Body, marker: make(chan struct{})}
	go st.read(resp.Body)
	return st, http.StatusOK, "", took, nil
}

// read reads the stream to its end, noting when the marker arrives.
func (st *benchStream) read(body io.Reader) {
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	seen := false
	for sc.Scan() {
		if !seen && strings.Contains(sc.Text(), `"name":"bench-marker"`) {
			st.at, seen = time.Now(), true
			close(st.marker)
		}
	}
}

// waitForAccess waits until the plane's RBAC lets the streamers in.
func (b *streamBench) waitForAccess(ctx context.Context) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, code, _, _, err := b.request(ctx, "bench-streamer-probe")
		if st != nil {
			st.close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("streams never allowed: %d %v", code, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (st *benchStream) close() {
	st.cancel()
	st.body.Close()
}

// open opens n streams spread over users identities, 16 at a time.
func (b *streamBench) open(ctx context.Context, n, users int) error {
	work := make(chan int)
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				st, code, _, _, err := b.request(ctx, fmt.Sprintf("bench-streamer-%d", i%users))
				if err == nil && st == nil {
					err = fmt.Errorf("stream %d: %d", i, code)
				}
				if err != nil {
					errs <- err
					continue
				}
				b.mu.Lock()
				b.streams = append(b.streams, st)
				b.mu.Unlock()
			}
		}()
	}
	for i := 0; i < n; i++ {
		work <- i
	}
	close(work)
	wg.Wait()
	close(errs)
	return <-errs
}

// deliver writes the marker object and returns, sorted, how long each
// stream took to carry it.
func (b *streamBench) deliver(ctx context.Context) ([]time.Duration, error) {
	c, err := b.s.client(b.plane)
	if err != nil {
		return nil, err
	}
	began := time.Now()
	if _, err := c.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "bench-marker"}}, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	out := make([]time.Duration, 0, len(b.streams))
	timeout := time.After(60 * time.Second)
	for i, st := range b.streams {
		select {
		case <-st.marker:
			out = append(out, st.at.Sub(began))
		case <-timeout:
			return nil, fmt.Errorf("stream %d of %d never carried the change", i, len(b.streams))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out, nil
}

// firstLine opens one more stream, without resourceVersion and without
// timeoutSeconds, while the others are open, and returns how long its
// first line (the plane's state starts with it) took to arrive.
func (b *streamBench) firstLine(ctx context.Context) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, b.s.config(b.plane).Host+"/snapshot?watch=true", nil)
	req.Header.Set("Authorization", "Bearer "+b.s.token)
	began := time.Now()
	resp, err := b.client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("stream from the current state: %s", resp.Status)
	}
	line, err := bufio.NewReader(resp.Body).ReadBytes('\n')
	if err != nil {
		return 0, fmt.Errorf("first line of a stream from the current state (%d bytes): %w", len(line), err)
	}
	return time.Since(began), nil
}

// probe opens one more stream per identity: each past its limit. It
// returns how many were refused with 429, the slowest answer and how many
// refusals said when to retry.
func (b *streamBench) probe(ctx context.Context, users int) (refused int, slowest time.Duration, retryAfter int) {
	for u := 0; u < users; u++ {
		st, code, retry, took, err := b.request(ctx, fmt.Sprintf("bench-streamer-%d", u))
		slowest = max(slowest, took)
		if st != nil {
			b.mu.Lock()
			b.streams = append(b.streams, st)
			b.mu.Unlock()
		}
		if err == nil && code == http.StatusTooManyRequests {
			refused++
			if retry != "" {
				retryAfter++
			}
		}
	}
	return refused, slowest, retryAfter
}

func (b *streamBench) closeAll() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, st := range b.streams {
		st.close()
	}
}
