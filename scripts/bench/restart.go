package main

import (
	"fmt"
	"os"
	"time"
)

type restartParams struct {
	// Planes are created once, then every restart reads them.
	Planes  int
	Workers int
	// Old is an earlier binary restarted on the same data dir, in turns
	// with the one under test (alternate); Rounds restarts of each.
	Old    string
	Rounds int
}

// restartScenario times restarts of a server with Planes stored: the data
// dir is made once (by the binary under test), then each binary is
// restarted on it Rounds times, taking turns, and the figures are the
// medians. A single restart's time moves by 0.2 s or more from one to the
// next on 2 cores, more than the changes it is meant to show.
func restartScenario(binary string, p restartParams) (Result, error) {
	s, err := startServer(binary)
	if err != nil {
		return Result{}, err
	}
	dir := s.dir
	defer os.RemoveAll(dir)
	var port int
	if _, err := fmt.Sscanf(s.url, "https://127.0.0.1:%d", &port); err != nil {
		s.terminate()
		return Result{}, err
	}
	if p.Planes > 0 {
		if err := createStoredPlanes(s, 0, p.Planes, p.Workers); err != nil {
			s.terminate()
			return Result{}, err
		}
	}
	s.terminate()
	first, last := "stored-00000", fmt.Sprintf("stored-%05d", p.Planes-1)
	measure := func(old bool) (map[string]float64, error) {
		bin := binary
		if old {
			bin = p.Old
		}
		r, err := startServerIn(bin, dir, port)
		if err != nil {
			return nil, err
		}
		defer r.terminate()
		ready := r.ready.Seconds()
		if p.Planes == 0 {
			fmt.Printf("   restart (old %v): ready %.3f s\n", old, ready)
			return map[string]float64{"restart_to_ready_s": ready}, nil
		}
		if err := planeAnswers(r, last); err != nil {
			return nil, err
		}
		answered := time.Since(r.started).Seconds()
		if err := planeTakesAWrite(r, first); err != nil {
			return nil, err
		}
		written := time.Since(r.started).Seconds()
		fmt.Printf("   restart (old %v): ready %.3f s, the last stored plane answers %.3f s, the first takes a write %.3f s\n",
			old, ready, answered, written)
		return map[string]float64{"restart_to_ready_s": ready, "restart_to_plane_s": answered, "restart_to_write_s": written}, nil
	}
	figures, err := roundsFigures(p.Rounds, p.Old != "", measure)
	if err != nil {
		return Result{}, err
	}
	return Result{
		Scenario: "restart",
		Params:   map[string]any{"planes": p.Planes, "workers": p.Workers, "rounds": max(p.Rounds, 1), "old_binary": p.Old != "", "datastore": "sqlite"},
		Figures:  figures,
		Notes: []string{
			"restart_to_ready_s: process start -> /readyz ok (polled every 5 ms) on a data dir holding the planes; restart_to_plane_s: -> the last stored plane answers GET namespace default; restart_to_write_s: -> then the first stored plane takes a ConfigMap create (writes wait until every stored plane is known). Each the median of its rounds (_min, _max: the extremes).",
			"old_*: --old-binary restarted on the same data dir, the two binaries taking turns going first.",
		},
	}, nil
}
