package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/utils/ptr"
)

type webhooksParams struct {
	Creates    int           // ConfigMaps created in each plane of the latency phase
	Planes     int           // planes of the memory phase, with and without a webhook each
	Workers    int           // concurrent plane setups
	SlowCalls  int           // concurrent creates held by the slow webhook
	SlowFor    time.Duration // how long the slow webhook holds each call
	OtherCalls int           // creates of the other plane timed while the slow ones wait
}

// benchHook is an admission webhook server of the benchmark process:
// /allow admits at once, /slow admits after holding the call.
type benchHook struct {
	url      string
	caBundle []byte
	slowFor  time.Duration
	waiting  atomic.Int32
	close    func()
}

func startBenchHook(slowFor time.Duration) (*benchHook, error) {
	certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKey("127.0.0.1", []net.IP{net.ParseIP("127.0.0.1")}, nil)
	if err != nil {
		return nil, err
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, err
	}
	h := &benchHook{caBundle: certPEM, slowFor: slowFor}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(h.serve))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	srv.StartTLS()
	h.url, h.close = srv.URL, srv.Close
	return h, nil
}

func (h *benchHook) serve(w http.ResponseWriter, r *http.Request) {
	var review admissionv1.AdmissionReview
	if err := json.NewDecoder(r.Body).Decode(&review); err != nil || review.Request == nil {
		http.Error(w, "bad review", http.StatusBadRequest)
		return
	}
	if strings.HasSuffix(r.URL.Path, "/slow") {
		h.waiting.Add(1)
		defer h.waiting.Add(-1)
		time.Sleep(h.slowFor)
	}
	review.Response = &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: true}
	review.Request = nil
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(&review)
}

// register installs a validating webhook for ConfigMap creates at path.
func (h *benchHook) register(ctx context.Context, c kubernetes.Interface, path string, timeout int32) error {
	_, err := c.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "bench"},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:         "bench.kplane.dev",
			ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: ptr.To(h.url + path), CABundle: h.caBundle},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}},
			}},
			FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1"},
			TimeoutSeconds:          ptr.To(timeout),
		}},
	}, metav1.CreateOptions{})
	return err
}

// webhooksScenario measures, on one server with a webhook server in the
// benchmark process: ConfigMap create latency in a plane without webhook
// configurations and in one with a validating webhook, side by side
// (alternating, one request at a time); another plane's create latency
// while a plane's webhook holds SlowCalls creates for SlowFor, next to the
// same plane's latency before; and the RSS that Planes planes with one
// webhook each (called once) add, next to as many planes without.
func webhooksScenario(binary string, p webhooksParams) (Result, error) {
	s, err := startServer(binary)
	if err != nil {
		return Result{}, err
	}
	defer s.stop()
	hook, err := startBenchHook(p.SlowFor)
	if err != nil {
		return Result{}, err
	}
	defer hook.close()
	figures := map[string]float64{}
	if err := webhookLatency(s, hook, p, figures); err != nil {
		return Result{}, err
	}
	if err := slowWebhookIsolation(s, hook, p, figures); err != nil {
		return Result{}, err
	}
	if err := webhookMemory(s, hook, p, figures); err != nil {
		return Result{}, err
	}
	return Result{
		Scenario: "webhooks",
		Params: map[string]any{"creates": p.Creates, "planes": p.Planes, "slow_calls": p.SlowCalls,
			"slow_for": p.SlowFor.String(), "other_calls": p.OtherCalls},
		Figures: figures,
		Notes: []string{
			fmt.Sprintf("ConfigMap create p50 %.2f ms without webhooks or policies, %.2f ms with one validating webhook, %.2f ms with one ValidatingAdmissionPolicy (p99 %.2f / %.2f / %.2f ms), planes interleaved",
				figures["no_webhook_p50_ms"], figures["one_webhook_p50_ms"], figures["one_vap_p50_ms"],
				figures["no_webhook_p99_ms"], figures["one_webhook_p99_ms"], figures["one_vap_p99_ms"]),
			fmt.Sprintf("while %d creates of one plane wait %s in its webhook, another plane's create p99 is %.2f ms, %.2fx its %.2f ms before (the bound is 2x)",
				p.SlowCalls, p.SlowFor, figures["other_during_slow_p99_ms"], figures["other_p99_ratio"], figures["other_before_p99_ms"]),
			fmt.Sprintf("RSS per plane with one webhook configuration (called once) %.1f KiB, with one webhook and one VAP %.1f KiB, without %.1f KiB",
				figures["rss_kib_per_plane_with_webhook"], figures["rss_kib_per_plane_with_webhook_and_vap"], figures["rss_kib_per_plane_without"]),
		},
	}, nil
}

func webhookLatency(s *server, hook *benchHook, p webhooksParams, figures map[string]float64) error {
	ctx := context.Background()
	none, err := s.client("wh-none")
	if err != nil {
		return err
	}
	one, err := s.client("wh-one")
	if err != nil {
		return err
	}
	if err := hook.register(ctx, one, "/allow", 10); err != nil {
		return err
	}
	vap, err := s.client("wh-vap")
	if err != nil {
		return err
	}
	if err := addBenchVAP(ctx, vap); err != nil {
		return err
	}
	lat := map[string][]time.Duration{}
	// i = -1 provisions the planes and builds the webhook's plugin and the
	// policy's compilation.
	for i := -1; i < p.Creates; i++ {
		for name, c := range map[string]*kubernetes.Clientset{"no_webhook": none, "one_webhook": one, "one_vap": vap} {
			began := time.Now()
			if _, err := c.CoreV1().ConfigMaps("default").Create(ctx, benchConfigMap(fmt.Sprintf("cm-%d", i+1), i), metav1.CreateOptions{}); err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			if i >= 0 {
				lat[name] = append(lat[name], time.Since(began))
			}
		}
	}
	for name, l := range lat {
		sort.Slice(l, func(i, j int) bool { return l[i] < l[j] })
		figures[name+"_p50_ms"] = ms(percentile(l, 0.50))
		figures[name+"_p99_ms"] = ms(percentile(l, 0.99))
	}
	figures["one_webhook_p50_ratio"] = figures["one_webhook_p50_ms"] / figures["no_webhook_p50_ms"]
	figures["one_vap_p50_ratio"] = figures["one_vap_p50_ms"] / figures["no_webhook_p50_ms"]
	return nil
}

// timedCreates creates n ConfigMaps one at a time and returns their
// latencies, sorted.
func timedCreates(ctx context.Context, c kubernetes.Interface, prefix string, n int) ([]time.Duration, error) {
	var out []time.Duration
	for i := 0; i < n; i++ {
		began := time.Now()
		if _, err := c.CoreV1().ConfigMaps("default").Create(ctx, benchConfigMap(fmt.Sprintf("%s-%d", prefix, i), i), metav1.CreateOptions{}); err != nil {
			return nil, err
		}
		out = append(out, time.Since(began))
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out, nil
}

func slowWebhookIsolation(s *server, hook *benchHook, p webhooksParams, figures map[string]float64) error {
	ctx := context.Background()
	slow, err := s.client("wh-slow")
	if err != nil {
		return err
	}
	other, err := s.client("wh-other")
	if err != nil {
		return err
	}
	if err := hook.register(ctx, slow, "/slow", int32(p.SlowFor/time.Second)+5); err != nil {
		return err
	}
	if err := hook.register(ctx, other, "/allow", 10); err != nil {
		return err
	}
	before, err := timedCreates(ctx, other, "before", p.OtherCalls)
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	for i := 0; i < p.SlowCalls; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = slow.CoreV1().ConfigMaps("default").Create(ctx, benchConfigMap(fmt.Sprintf("slow-%d", i), i), metav1.CreateOptions{})
		}()
	}
	deadline := time.Now().Add(p.SlowFor / 2)
	for int(hook.waiting.Load()) < p.SlowCalls && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	figures["slow_calls_waiting"] = float64(hook.waiting.Load())
	during, err := timedCreates(ctx, other, "during", p.OtherCalls)
	stillWaiting := hook.waiting.Load()
	wg.Wait()
	if err != nil {
		return err
	}
	if stillWaiting == 0 {
		return fmt.Errorf("the slow calls ended before the other plane's creates: raise the slow duration")
	}
	figures["other_before_p50_ms"] = ms(percentile(before, 0.50))
	figures["other_before_p99_ms"] = ms(percentile(before, 0.99))
	figures["other_during_slow_p50_ms"] = ms(percentile(during, 0.50))
	figures["other_during_slow_p99_ms"] = ms(percentile(during, 0.99))
	figures["other_p99_ratio"] = figures["other_during_slow_p99_ms"] / figures["other_before_p99_ms"]
	return nil
}

// webhookMemory sets up Planes planes without webhooks, then Planes planes
// with one (each called once, so its plugin is built), then Planes planes
// with one webhook and one ValidatingAdmissionPolicy, reading the server's
// RSS after a forced GC before and after each third.
func webhookMemory(s *server, hook *benchHook, p webhooksParams, figures map[string]float64) error {
	phases := []struct {
		prefix string
		admit  planeAdmission
		figure string
	}{
		{"wh-plain", planeAdmission{}, "rss_kib_per_plane_without"},
		{"wh-hooked", planeAdmission{webhook: true}, "rss_kib_per_plane_with_webhook"},
		{"wh-both", planeAdmission{webhook: true, vap: true}, "rss_kib_per_plane_with_webhook_and_vap"},
	}
	before, _, err := settle(s)
	if err != nil {
		return err
	}
	const kib = 1 << 10
	for _, phase := range phases {
		if err := setupPlanes(s, hook, phase.prefix, p, phase.admit); err != nil {
			return err
		}
		after, _, err := settle(s)
		if err != nil {
			return err
		}
		figures[phase.figure] = (after - before) / kib / float64(p.Planes)
		before = after
	}
	return nil
}

// planeAdmission is what setupPlanes gives each plane.
type planeAdmission struct{ webhook, vap bool }

func setupPlanes(s *server, hook *benchHook, prefix string, p webhooksParams, admit planeAdmission) error {
	ctx := context.Background()
	work := make(chan int)
	errs := make(chan error, p.Workers)
	var wg sync.WaitGroup
	for w := 0; w < p.Workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				c, err := s.client(fmt.Sprintf("%s-%d", prefix, i))
				if err == nil && admit.webhook {
					err = hook.register(ctx, c, "/allow", 10)
				}
				if err == nil && admit.vap {
					err = addBenchVAP(ctx, c)
				}
				// The webhook's plugin is built by the plane's first request
				// after its configuration shows in the cache: two creates,
				// in planes with and without webhooks alike.
				for n := 0; err == nil && n < 2; n++ {
					_, err = c.CoreV1().ConfigMaps("default").Create(ctx, benchConfigMap(fmt.Sprintf("cm-%d", n), n), metav1.CreateOptions{})
				}
				if err != nil {
					errs <- fmt.Errorf("plane %s-%d: %w", prefix, i, err)
					return
				}
			}
		}()
	}
	for i := 0; i < p.Planes; i++ {
		select {
		case work <- i:
		case err := <-errs:
			close(work)
			wg.Wait()
			return err
		}
	}
	close(work)
	wg.Wait()
	select {
	case err := <-errs:
		return err
	default:
		return nil
	}
}
