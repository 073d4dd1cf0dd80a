package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
)

type auditParams struct {
	// Ops requests of each verb per configuration and round, from Workers
	// concurrent clients.
	Ops, Workers int
	// Rounds alternate the configurations, so that the machine's load
	// (shared, 2 cores) falls on all of them alike; the median round counts.
	Rounds int
	// FullPlanes are filled to a full trail for the memory figure.
	FullPlanes   int
	BufferEvents int
}

// auditConfig is one way of serving the same load.
type auditConfig struct {
	name   string
	server *server
	plane  string
	client *kubernetes.Clientset
}

// auditScenario measures what recording every request costs: the same
// GET, LIST and CREATE load against a server without audit
// (--audit-buffer-events=0) and against planes audited at Metadata and at
// RequestResponse, in one run, rounds interleaved; then the memory of a
// plane whose trail is full.
func auditScenario(binary string, p auditParams) (Result, error) {
	off, err := startServer(binary, "--audit-buffer-events", "0")
	if err != nil {
		return Result{}, err
	}
	defer off.stop()
	on, err := startServer(binary, "--audit-buffer-events", fmt.Sprint(p.BufferEvents))
	if err != nil {
		return Result{}, err
	}
	defer on.stop()
	configs := []*auditConfig{{name: "off", server: off, plane: "audit-off"},
		{name: "metadata", server: on, plane: "audit-metadata"}, {name: "requestresponse", server: on, plane: "audit-rr"}}
	for _, c := range configs {
		if _, err := createPlane(c.server, c.plane, seedObjects); err != nil {
			return Result{}, err
		}
		if c.client, err = c.server.client(c.plane); err != nil {
			return Result{}, err
		}
	}
	if err := setAuditLevel(on, "audit-rr", "RequestResponse"); err != nil {
		return Result{}, err
	}
	perSecond := map[string][]float64{}
	p99 := map[string][]float64{}
	// One set of verbs for every round: CREATE numbers its objects from
	// the set's counter, so a second set would create the same names.
	verbs := configMapVerbs()
	for round := 0; round < p.Rounds; round++ {
		for _, verb := range verbs {
			for _, c := range configs {
				do := func(ctx context.Context, i int) error { return verb.do(ctx, c.client, i) }
				if round == 0 {
					if _, _, err := load(max(1, p.Ops/5), p.Workers, do); err != nil {
						return Result{}, fmt.Errorf("%s %s warm-up: %w", verb.name, c.name, err)
					}
				}
				lat, took, err := load(p.Ops, p.Workers, do)
				if err != nil {
					return Result{}, fmt.Errorf("%s %s: %w", verb.name, c.name, err)
				}
				key := verb.name + "_" + c.name
				perSecond[key] = append(perSecond[key], float64(p.Ops)/took.Seconds())
				p99[key] = append(p99[key], ms(percentile(lat, 0.99)))
			}
		}
	}
	figures := map[string]float64{}
	for _, verb := range verbs {
		base := median(perSecond[verb.name+"_off"])
		for _, c := range configs {
			key := verb.name + "_" + c.name
			figures[key+"_per_second"] = median(perSecond[key])
			figures[key+"_p99_ms"] = median(p99[key])
			if c.name != "off" {
				figures[key+"_overhead_pct"] = 100 * (base - figures[key+"_per_second"]) / base
			}
		}
	}
	if err := fullTrailMemory(on, p, figures); err != nil {
		return Result{}, err
	}
	return Result{
		Scenario: "audit",
		Params: map[string]any{"requestsPerVerb": p.Ops, "workers": p.Workers, "rounds": p.Rounds,
			"bufferEvents": p.BufferEvents, "fullPlanes": p.FullPlanes, "datastore": "sqlite"},
		Figures: figures,
		Notes: []string{
			fmt.Sprintf("off: a server with --audit-buffer-events=0 (no audit filter at all); metadata, requestresponse: planes of a second server at those levels. "+
				"Each round runs %d requests of each verb from %d clients against each configuration in turn; figures are the median of %d rounds.", p.Ops, p.Workers, p.Rounds),
			"overhead_pct: throughput lost against off (negative: faster, i.e. noise). GET reads one of 10 configmaps, LIST lists them, CREATE writes a new one (with its body recorded at RequestResponse).",
			"full_trail_*: FullPlanes planes each make bufferEvents GETs (metadata) or PATCHes of their seeded configmaps (requestresponse, bodies recorded); heap_per_plane: heap in use (after two forced GCs) after minus before, per plane, minus the same for planes audited at None (same_requests_unaudited: PATCHes also grow the watch cache); lines_per_plane: the bytes of the lines GET /audit serves plus a 56-byte ring entry each; heap_1000_planes: heap_per_plane times 1,000.",
		},
	}, nil
}

// loadVerb is one kind of request a load scenario makes.
type loadVerb struct {
	name string
	do   func(ctx context.Context, c *kubernetes.Clientset, i int) error
}

// configMapVerbs GET one of the seeded ConfigMaps, LIST them and CREATE
// new ones: the requests the audit and scale-out scenarios time.
func configMapVerbs() []loadVerb {
	var created atomic.Int64
	return []loadVerb{
		{"get", func(ctx context.Context, c *kubernetes.Clientset, i int) error {
			_, err := c.CoreV1().ConfigMaps("default").Get(ctx, fmt.Sprintf("cm-%d", i%seedObjects), metav1.GetOptions{})
			return err
		}},
		{"list", func(ctx context.Context, c *kubernetes.Clientset, i int) error {
			_, err := c.CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{})
			return err
		}},
		{"create", func(ctx context.Context, c *kubernetes.Clientset, i int) error {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("load-%d", created.Add(1))},
				Data: map[string]string{"key": "value"}}
			_, err := c.CoreV1().ConfigMaps("kube-public").Create(ctx, cm, metav1.CreateOptions{})
			return err
		}},
	}
}

// patchVerb changes one of the seeded configmaps: a write whose body and
// answer a RequestResponse trail records, that adds no object to the
// server (whose memory would blur the trail's).
func patchVerb() loadVerb {
	return loadVerb{"patch", func(ctx context.Context, c *kubernetes.Clientset, i int) error {
		patch := []byte(fmt.Sprintf(`{"data":{"n":"%d"}}`, i))
		_, err := c.CoreV1().ConfigMaps("default").Patch(ctx, fmt.Sprintf("cm-%d", i%seedObjects), types.MergePatchType, patch, metav1.PatchOptions{})
		return err
	}}
}

func setAuditLevel(s *server, plane, level string) error {
	root, err := dynamic.NewForConfig(s.config("root"))
	if err != nil {
		return err
	}
	patch := []byte(fmt.Sprintf(`{"spec":{"audit":{"level":%q}}}`, level))
	_, err = root.Resource(planesGVR).Patch(context.Background(), plane, types.MergePatchType, patch, metav1.PatchOptions{})
	return err
}

// fullTrailMemory fills FullPlanes planes' trails at each level and
// reports the heap they added per plane and the size of their lines. The
// same requests to planes audited at None are the baseline: PATCHes also
// grow the watch cache's history, which is not the trail's.
func fullTrailMemory(s *server, p auditParams, figures map[string]float64) error {
	verbs := configMapVerbs()
	for _, level := range []struct {
		name, level string
		verb        loadVerb
	}{{"metadata", "Metadata", verbs[0]}, {"requestresponse", "RequestResponse", patchVerb()}} {
		without, _, _, err := fillTrails(s, p, level.name+"-none", "None", level.verb)
		if err != nil {
			return err
		}
		with, lineBytes, lines, err := fillTrails(s, p, level.name, level.level, level.verb)
		if err != nil {
			return err
		}
		perPlane := (with - without) / (1 << 20)
		figures["full_trail_"+level.name+"_heap_per_plane_mib"] = perPlane
		figures["full_trail_"+level.name+"_same_requests_unaudited_heap_per_plane_mib"] = without / (1 << 20)
		figures["full_trail_"+level.name+"_heap_1000_planes_gib"] = perPlane * 1000 / 1024
		// What the ring holds: the lines, and a 56-byte entry per event.
		figures["full_trail_"+level.name+"_lines_per_plane_mib"] = float64(lineBytes+56*lines) / float64(p.FullPlanes) / (1 << 20)
		figures["full_trail_"+level.name+"_line_bytes"] = float64(lineBytes) / float64(max(1, lines))
		figures["full_trail_"+level.name+"_events_per_plane"] = float64(lines) / float64(p.FullPlanes)
	}
	return nil
}

// fillTrails makes FullPlanes planes audited at level, sends each
// BufferEvents requests of verb and returns the heap added per plane and
// the lines their trails serve.
func fillTrails(s *server, p auditParams, name, level string, verb loadVerb) (heapPerPlane float64, lineBytes, lines int, err error) {
	planes := make([]string, p.FullPlanes)
	for i := range planes {
		planes[i] = fmt.Sprintf("full-%s-%d", name, i)
		if _, err := createPlane(s, planes[i], seedObjects); err != nil {
			return 0, 0, 0, err
		}
		if err := setAuditLevel(s, planes[i], level); err != nil {
			return 0, 0, 0, err
		}
	}
	before, err := heapInUse(s)
	if err != nil {
		return 0, 0, 0, err
	}
	for _, plane := range planes {
		c, err := s.client(plane)
		if err != nil {
			return 0, 0, 0, err
		}
		if _, _, err := load(p.BufferEvents, 8, func(ctx context.Context, i int) error { return verb.do(ctx, c, i) }); err != nil {
			return 0, 0, 0, err
		}
		if level == "None" {
			continue
		}
		body, err := readTrail(s, plane)
		if err != nil {
			return 0, 0, 0, err
		}
		lineBytes += len(body)
		lines += strings.Count(body, "\n")
	}
	after, err := heapInUse(s)
	if err != nil {
		return 0, 0, 0, err
	}
	return (after - before) / float64(p.FullPlanes), lineBytes, lines, nil
}

func heapInUse(s *server) (float64, error) {
	if err := s.collectGarbage(); err != nil {
		return 0, err
	}
	return s.metric("go_memstats_heap_inuse_bytes")
}

func readTrail(s *server, plane string) (string, error) {
	req, _ := http.NewRequest(http.MethodGet, s.url+"/clusters/"+plane+"/control-plane/audit", nil)
	req.Header.Set("Authorization", "Bearer "+s.token)
	resp, err := s.http().Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET audit of %s: %s %s", plane, resp.Status, body)
	}
	return string(body), err
}

func median(values []float64) float64 {
	if len(values) == 0 {
		return 0
	}
	sorted := append([]float64(nil), values...)
	sort.Float64s(sorted)
	mid := len(sorted) / 2
	if len(sorted)%2 == 0 {
		return (sorted[mid-1] + sorted[mid]) / 2
	}
	return sorted[mid]
}
