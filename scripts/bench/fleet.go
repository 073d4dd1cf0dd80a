package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
)

var fleetsGVR = schema.GroupVersionResource{Group: "kplane.dev", Version: "v1", Resource: "fleets"}

type fleetParams struct {
	Replicas   int
	Bootstrap  string
	ProfileDir string
}

// fleetScenario applies one Fleet of Replicas members (deletionPolicy
// Delete) and follows it with a watch: how long from the create until
// status.readyReplicas reaches Replicas, how many members were ready
// after 5 seconds, how many status writes that took, how large the
// stored Fleet is, and the server's memory before and after. Then it
// deletes the Fleet and measures how long until it (and with it every
// member plane) is gone.
func fleetScenario(binary string, p fleetParams) (Result, error) {
	s, err := startServer(binary, "--plane-bootstrap", p.Bootstrap)
	if err != nil {
		return Result{}, err
	}
	defer s.stop()
	client, err := dynamic.NewForConfig(s.config("root"))
	if err != nil {
		return Result{}, err
	}
	fleets := client.Resource(fleetsGVR)
	figures := map[string]float64{}
	m0, err := measure(s)
	if err != nil {
		return Result{}, err
	}
	m0.record(figures, "before_")

	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	fleet := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kplane.dev/v1", "kind": "Fleet", "metadata": map[string]any{"name": "bench"},
		"spec": map[string]any{"replicas": int64(p.Replicas), "deletionPolicy": "Delete"},
	}}
	var cpuProfile chan error
	if p.ProfileDir != "" {
		cpuProfile = make(chan error, 1)
		go func() { cpuProfile <- s.cpuProfile(filepath.Join(p.ProfileDir, "fleet-cpu.pprof"), 20*time.Second) }()
	}
	began := time.Now()
	created, err := fleets.Create(ctx, fleet, metav1.CreateOptions{})
	if err != nil {
		return Result{}, err
	}
	progress, err := awaitFleetReady(ctx, fleets, created, p.Replicas, began)
	if err != nil {
		return Result{}, err
	}
	writes, first := progress.writes, progress.first
	if progress.readyAt5s >= 0 {
		figures["members_ready_at_5s"] = float64(progress.readyAt5s)
	}
	elapsed := time.Since(began)
	if cpuProfile != nil {
		if err := <-cpuProfile; err != nil {
			return Result{}, err
		}
	}
	figures["apply_to_ready_seconds"] = elapsed.Seconds()
	figures["first_member_ready_ms"] = ms(first)
	figures["members_ready_per_second"] = float64(p.Replicas) / elapsed.Seconds()
	figures["fleet_updates_until_ready"] = float64(writes)

	raw, err := client.Resource(fleetsGVR).Get(ctx, "bench", metav1.GetOptions{})
	if err != nil {
		return Result{}, err
	}
	data, _ := json.Marshal(raw.Object)
	figures["fleet_object_bytes"] = float64(len(data))
	figures["fleet_object_bytes_per_member"] = float64(len(data)) / float64(p.Replicas)

	m1, err := measure(s)
	if err != nil {
		return Result{}, err
	}
	m1.record(figures, "ready_")
	figures["marginal_rss_mib_per_member"] = (m1.rss - m0.rss) / (1 << 20) / float64(p.Replicas)
	if err := profile(s, p.ProfileDir, "fleet-ready"); err != nil {
		return Result{}, err
	}

	began = time.Now()
	if err := fleets.Delete(ctx, "bench", metav1.DeleteOptions{}); err != nil {
		return Result{}, err
	}
	if err := waitFor(ctx, func() (bool, error) {
		_, err := fleets.Get(ctx, "bench", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	}); err != nil {
		return Result{}, err
	}
	figures["delete_to_gone_seconds"] = time.Since(began).Seconds()
	planes, err := client.Resource(planesGVR).List(ctx, metav1.ListOptions{})
	if err != nil {
		return Result{}, err
	}
	if len(planes.Items) != 1 {
		return Result{}, fmt.Errorf("%d planes remain after the Fleet was deleted, want only root", len(planes.Items))
	}
	return Result{
		Scenario: "fleet",
		Params:   map[string]any{"replicas": p.Replicas, "bootstrap": p.Bootstrap, "datastore": "sqlite"},
		Figures:  figures,
		Notes: []string{
			"apply_to_ready: Fleet create until a watch sees status.readyReplicas == replicas (a member is ready when its Plane is Ready and its /readyz answers ok).",
			"fleet_updates_until_ready counts the Fleet's MODIFIED events (finalizer + status writes).",
			"delete_to_gone: deletionPolicy Delete, until the Fleet is gone, i.e. every member plane was deleted with all its objects.",
		},
	}, nil
}

// cpuProfile saves a CPU profile of the server over d (needs
// --enable-profiling).
func (s *server) cpuProfile(path string, d time.Duration) error {
	req, _ := http.NewRequest("GET", fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", s.url, int(d.Seconds())), nil)
	req.Header.Set("Authorization", "Bearer "+s.token)
	c := s.http()
	c.Timeout = d + time.Minute
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("cpu profile: %s", resp.Status)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(f, resp.Body)
	return err
}

// fleetProgress is what a Fleet's watch showed until it was ready.
type fleetProgress struct {
	// writes counts its MODIFIED events; first is when a member was first
	// ready; readyAt5s the members ready 5 s in (-1: no event by then).
	writes    int
	first     time.Duration
	readyAt5s int64
}

// awaitFleetReady watches the Fleet created until status.readyReplicas
// reaches replicas, reporting every 5 s.
func awaitFleetReady(ctx context.Context, fleets dynamic.ResourceInterface, created *unstructured.Unstructured,
	replicas int, began time.Time) (fleetProgress, error) {
	progress := fleetProgress{readyAt5s: -1}
	ready := int64(-1)
	rv := created.GetResourceVersion()
	lastReport := time.Now()
	// The client ends a watch after its timeout: watch again from the last
	// version seen.
	for ready < int64(replicas) {
		w, err := fleets.Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + created.GetName(), ResourceVersion: rv})
		if err != nil {
			return progress, err
		}
		for ev := range w.ResultChan() {
			if ev.Type == watch.Error {
				w.Stop()
				return progress, apierrors.FromObject(ev.Object)
			}
			u := ev.Object.(*unstructured.Unstructured)
			rv = u.GetResourceVersion()
			if ev.Type == watch.Modified {
				progress.writes++
			}
			n, _, _ := unstructured.NestedInt64(u.Object, "status", "readyReplicas")
			since := time.Since(began)
			if n > 0 && progress.first == 0 {
				progress.first = since
			}
			if since <= 5*time.Second {
				progress.readyAt5s = n
			}
			ready = n
			if time.Since(lastReport) > 5*time.Second {
				fmt.Printf("   fleet: %d/%d members ready after %s\n", n, replicas, since.Round(time.Millisecond))
				lastReport = time.Now()
			}
			if ready >= int64(replicas) {
				break
			}
		}
		w.Stop()
		if ctx.Err() != nil {
			return progress, fmt.Errorf("fleet not ready: %d/%d", ready, replicas)
		}
	}
	return progress, nil
}
