package main

import (
	"fmt"
	"math"
	"path/filepath"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// writePlots draws a PNG for each figure the results hold into dir and
// returns their file names.
func writePlots(dir string, results []Result) ([]string, error) {
	var written []string
	for _, f := range []struct {
		name string
		draw func([]Result) (*plot.Plot, error)
	}{
		{"density.png", densityPlot},
		{"create-latency.png", createLatencyPlot},
		{"baseline-density.png", baselineDensityPlot},
		{"baseline-ready.png", baselineReadyPlot},
		{"fleet.png", fleetPlot},
		{"snapshot.png", snapshotPlot},
		{"requests-throughput.png", requestsPlot("per_second", "requests per second")},
		{"requests-p99.png", requestsPlot("p99_ms", "p99 latency (ms)")},
		{"watch.png", watchPlot},
	} {
		p, err := f.draw(results)
		if err != nil {
			return written, fmt.Errorf("%s: %w", f.name, err)
		}
		if p == nil {
			continue
		}
		if err := p.Save(16*vg.Centimeter, 10*vg.Centimeter, filepath.Join(dir, f.name)); err != nil {
			return written, err
		}
		written = append(written, f.name)
	}
	return written, nil
}

// densityPlot: RSS and Go heap against bootstrapped planes, a line per
// datastore.
func densityPlot(results []Result) (*plot.Plot, error) {
	var curves []*Result
	for i := range results {
		if results[i].Scenario == "curve" {
			curves = append(curves, &results[i])
		}
	}
	if len(curves) == 0 {
		return nil, nil
	}
	p := plot.New()
	p.Title.Text = "kplane memory against planes (forced GC, datastore in process)"
	p.X.Label.Text = "bootstrapped planes"
	p.Y.Label.Text = "MiB"
	p.Legend.Top, p.Legend.Left = true, true
	var lines []any
	for _, c := range curves {
		var rss, heap plotter.XYs
		for _, n := range curveSteps([]*Result{c}) {
			rss = append(rss, plotter.XY{X: float64(n), Y: c.Figures[fmt.Sprintf("rss_mib_at_%d", n)]})
			heap = append(heap, plotter.XY{X: float64(n), Y: c.Figures[fmt.Sprintf("heap_inuse_mib_at_%d", n)]})
		}
		ds := fmt.Sprint(c.Params["datastore"])
		lines = append(lines, fmt.Sprintf("RSS, %s (%.3f MiB/plane)", ds, c.Figures["marginal_rss_mib_per_plane"]), rss,
			fmt.Sprintf("Go heap, %s (%.3f MiB/plane)", ds, c.Figures["marginal_heap_mib_per_plane"]), heap)
	}
	if err := plotutil.AddLinePoints(p, lines...); err != nil {
		return nil, err
	}
	p.Y.Min = 0
	// Room above the lines for the legend.
	p.Y.Max *= 1.4
	return p, nil
}

// createLatencyPlot: new-plane create->ready percentiles per datastore.
func createLatencyPlot(results []Result) (*plot.Plot, error) {
	var groups []string
	series := map[string][]float64{}
	for _, r := range results {
		if r.Scenario != "curve" || r.Figures["create_to_ready_p50_ms"] == 0 {
			continue
		}
		groups = append(groups, fmt.Sprint(r.Params["datastore"]))
		for _, q := range []string{"p50", "p90", "p99"} {
			series[q] = append(series[q], r.Figures["create_to_ready_"+q+"_ms"])
		}
	}
	if len(groups) == 0 {
		return nil, nil
	}
	workers := fmt.Sprint(find(results, "curve").Params["workers"])
	return groupedBars(fmt.Sprintf("new plane create → ready, %s concurrent clients", workers), "ms", groups,
		[]string{"p50", "p90", "p99"}, series)
}

// baselineDensityPlot: planes per GiB, kplane against one kube-apiserver
// per plane, on a log scale.
func baselineDensityPlot(results []Result) (*plot.Plot, error) {
	base := find(results, "baseline")
	if base == nil || base.Figures["planes_per_gib"] == 0 {
		return nil, nil
	}
	var names []string
	var values []float64
	for _, ds := range []string{"sqlite", "etcd"} {
		if c := find(results, "curve", "datastore", ds); c != nil && c.Figures["marginal_rss_mib_per_plane"] > 0 {
			names = append(names, "kplane, "+ds)
			values = append(values, 1024/c.Figures["marginal_rss_mib_per_plane"])
		}
	}
	names = append(names, "kube-apiserver + etcd")
	values = append(values, base.Figures["planes_per_gib"])
	return logBars("planes per GiB of RAM (log scale)", "planes per GiB", names, values, "%.0f")
}

// baselineReadyPlot: time until a new plane answers, kplane against
// starting a kube-apiserver, on a log scale.
func baselineReadyPlot(results []Result) (*plot.Plot, error) {
	base := find(results, "baseline")
	if base == nil || base.Figures["start_to_ready_seconds_mean"] == 0 {
		return nil, nil
	}
	var names []string
	var values []float64
	for _, ds := range []string{"sqlite", "etcd"} {
		if c := find(results, "curve", "datastore", ds); c != nil && c.Figures["create_to_ready_p50_ms"] > 0 {
			names = append(names, "kplane p50, "+ds)
			values = append(values, c.Figures["create_to_ready_p50_ms"])
		}
	}
	names = append(names, "kube-apiserver start")
	values = append(values, base.Figures["start_to_ready_seconds_mean"]*1000)
	return logBars("time until a new plane answers (log scale)", "ms", names, values, "%.1f ms")
}

func fleetPlot(results []Result) (*plot.Plot, error) {
	r := find(results, "fleet")
	if r == nil || r.Figures["apply_to_ready_seconds"] == 0 {
		return nil, nil
	}
	names := []string{"first member ready", fmt.Sprintf("%v members ready", r.Params["replicas"])}
	values := []float64{r.Figures["first_member_ready_ms"] / 1000, r.Figures["apply_to_ready_seconds"]}
	if d := r.Figures["delete_to_gone_seconds"]; d > 0 {
		names = append(names, "Fleet deleted, members gone")
		values = append(values, d)
	}
	return groupedBars(fmt.Sprintf("Fleet of %v members: apply → readyReplicas", r.Params["replicas"]), "seconds", names,
		[]string{"seconds"}, map[string][]float64{"seconds": values})
}

func snapshotPlot(results []Result) (*plot.Plot, error) {
	r := find(results, "snapshot")
	if r == nil || r.Figures["snapshot_p50_ms"] == 0 {
		return nil, nil
	}
	var names []string
	var values []float64
	for _, q := range []string{"p50", "p90", "p99"} {
		if v, ok := r.Figures["snapshot_"+q+"_ms"]; ok {
			names = append(names, q)
			values = append(values, v)
		}
	}
	return groupedBars(fmt.Sprintf("snapshot of a plane with %v objects (%.0f KiB) while %v planes take writes",
		r.Params["objects"], r.Figures["snapshot_bytes"]/1024, r.Params["busyPlanes"]), "ms", names,
		[]string{"latency"}, map[string][]float64{"latency": values})
}

func requestsPlot(figure, label string) func([]Result) (*plot.Plot, error) {
	return func(results []Result) (*plot.Plot, error) {
		r := find(results, "requests")
		if r == nil {
			return nil, nil
		}
		spread := fmt.Sprintf("spread over %v planes", r.Params["planes"])
		series := map[string][]float64{}
		verbs := []string{"GET", "LIST", "CREATE"}
		for _, v := range verbs {
			series["one plane"] = append(series["one plane"], r.Figures[strings.ToLower(v)+"_one_plane_"+figure])
			series[spread] = append(series[spread], r.Figures[strings.ToLower(v)+"_spread_"+figure])
		}
		return groupedBars(fmt.Sprintf("%s, %v clients: one plane vs %s", label, r.Params["workers"], spread), label, verbs,
			[]string{"one plane", spread}, series)
	}
}

func watchPlot(results []Result) (*plot.Plot, error) {
	r := find(results, "watch")
	if r == nil {
		return nil, nil
	}
	var groups []string
	series := map[string][]float64{}
	for _, n := range watcherCounts(r) {
		groups = append(groups, fmt.Sprintf("%d watchers", n))
		for _, q := range []string{"p50", "p99"} {
			series[q] = append(series[q], r.Figures[fmt.Sprintf("watchers_%d_delivery_%s_ms", n, q)])
		}
	}
	if len(groups) == 0 {
		return nil, nil
	}
	return groupedBars(fmt.Sprintf("watch delivery latency, %v watchers per plane", r.Params["watchersPerPlane"]), "ms", groups,
		[]string{"p50", "p99"}, series)
}

// groupedBars draws one group of bars per entry of groups, a bar per
// series in each.
func groupedBars(title, ylabel string, groups, names []string, series map[string][]float64) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = title
	p.Y.Label.Text = ylabel
	p.Legend.Top = true
	width := vg.Points(math.Min(40, 240/float64(len(groups)*len(names))))
	for i, name := range names {
		bars, err := plotter.NewBarChart(plotter.Values(series[name]), width)
		if err != nil {
			return nil, err
		}
		bars.LineStyle.Width = 0
		bars.Color = plotutil.Color(i)
		bars.Offset = width * vg.Length(float64(i)-float64(len(names)-1)/2)
		p.Add(bars)
		if len(names) > 1 {
			p.Legend.Add(name, bars)
		}
	}
	p.NominalX(groups...)
	p.Y.Min = 0
	// Room above the bars for the legend.
	highest := 0.0
	for _, vs := range series {
		for _, v := range vs {
			highest = math.Max(highest, v)
		}
	}
	p.Y.Max = highest * 1.3
	return p, nil
}

// logBars draws one bar per value on a log scale, labelled with its
// value: for quantities that differ by orders of magnitude.
func logBars(title, ylabel string, names []string, values []float64, format string) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = title
	p.Y.Label.Text = ylabel
	lowest, highest := math.Inf(1), 0.0
	for _, v := range values {
		lowest, highest = math.Min(lowest, v), math.Max(highest, v)
	}
	if lowest <= 0 {
		return nil, fmt.Errorf("log scale needs positive values, got %v", values)
	}
	floor := math.Pow(10, math.Floor(math.Log10(lowest)))
	var labels plotter.XYLabels
	for i, v := range values {
		x := float64(i)
		bar, err := plotter.NewPolygon(plotter.XYs{{X: x - 0.3, Y: floor}, {X: x + 0.3, Y: floor}, {X: x + 0.3, Y: v}, {X: x - 0.3, Y: v}})
		if err != nil {
			return nil, err
		}
		bar.Color = plotutil.Color(i)
		bar.LineStyle.Width = 0
		p.Add(bar)
		labels.XYs = append(labels.XYs, plotter.XY{X: x - 0.15, Y: v})
		labels.Labels = append(labels.Labels, fmt.Sprintf(format, v))
	}
	l, err := plotter.NewLabels(labels)
	if err != nil {
		return nil, err
	}
	l.Offset.Y = vg.Points(3)
	p.Add(l)
	p.NominalX(names...)
	p.X.Min, p.X.Max = -0.5, float64(len(values))-0.5
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Y.Min, p.Y.Max = floor, math.Pow(10, math.Ceil(math.Log10(highest*3)))
	return p, nil
}
