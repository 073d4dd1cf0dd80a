package main

import (
	"math"
	"reflect"
	"strings"
	"testing"
)

func TestCapSteps(t *testing.T) {
	for _, c := range []struct {
		steps []int
		max   int
		want  []int
	}{
		{[]int{0, 100, 1000, 5000, 10000}, 10000, []int{0, 100, 1000, 5000, 10000}},
		{[]int{0, 100, 1000, 5000, 10000}, 200, []int{0, 100, 200}},
		{[]int{1000, 0, 100}, 1000, []int{0, 100, 1000}},
		{[]int{0, 10, 10, 20}, 20, []int{0, 10, 20}},
		{nil, 50, []int{50}},
	} {
		if got := capSteps(append([]int(nil), c.steps...), c.max); !reflect.DeepEqual(got, c.want) {
			t.Errorf("capSteps(%v, %d) = %v, want %v", c.steps, c.max, got, c.want)
		}
	}
}

func TestInts(t *testing.T) {
	got, err := ints("1000, 10000,")
	if err != nil || !reflect.DeepEqual(got, []int{1000, 10000}) {
		t.Errorf("ints = %v, %v", got, err)
	}
	if _, err := ints("10,x"); err == nil {
		t.Error("ints accepted x")
	}
	if _, err := ints("-1"); err == nil {
		t.Error("ints accepted -1")
	}
}

// TestComparison checks the density ratio and the headline table from
// figures whose ratio is known.
func TestComparison(t *testing.T) {
	results := []Result{
		{Scenario: "curve", Params: map[string]any{"datastore": "sqlite"}, Figures: map[string]float64{
			"marginal_rss_mib_per_plane": 0.5, "rss_mib_per_plane_total": 2, "create_to_ready_p50_ms": 10}},
		{Scenario: "baseline", Params: map[string]any{"instances": 3}, Figures: map[string]float64{
			"mib_per_plane": 256, "planes_per_gib": 4, "start_to_ready_seconds_mean": 3}},
		{Scenario: "comparison", Figures: map[string]float64{"stale": 1}},
	}
	out := withComparison(results)
	var cmp *Result
	for i := range out {
		if out[i].Scenario == "comparison" {
			if cmp != nil {
				t.Fatal("two comparisons")
			}
			cmp = &out[i]
		}
	}
	if cmp == nil {
		t.Fatal("no comparison")
	}
	for k, want := range map[string]float64{
		"kplane_sqlite_planes_per_gib":                2048,
		"kplane_sqlite_density_ratio":                 512,
		"kplane_sqlite_density_ratio_with_fixed_cost": 128,
		"kplane_sqlite_ready_speedup":                 300,
		"baseline_planes_per_gib":                     4,
	} {
		if got := cmp.Figures[k]; math.Abs(got-want) > 1e-9 {
			t.Errorf("%s = %v, want %v", k, got, want)
		}
	}
	if _, ok := cmp.Figures["stale"]; ok {
		t.Error("the old comparison was kept")
	}
	table := sideBySideTable(out)
	for _, want := range []string{"| memory per plane (RSS) | 0.500 MiB | – | 256 MiB |", "| planes per GiB | 2048 | – | 4.0 |", "×512"} {
		if !strings.Contains(table, want) {
			t.Errorf("table has no %q:\n%s", want, table)
		}
	}
}

// The report names a command anyone can rerun from the repository, not the
// build-cache path of the binary `go run` made.
func TestReproduceCommand(t *testing.T) {
	got := reproduceCommand([]string{"--binary", "bin/kplane", "--quick"})
	if want := "go run ./scripts/bench --binary bin/kplane --quick"; got != want {
		t.Fatalf("reproduceCommand = %q, want %q", got, want)
	}
}
