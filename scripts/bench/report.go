package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// writeReport writes the JSON file at out and, beside it, the Markdown
// table (same name, .md) and the plots of the figures it holds.
func writeReport(out string, report Report) error {
	report.Results = withComparison(report.Results)
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	data, err := json.MarshalIndent(report, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(out, append(data, '\n'), 0o644); err != nil {
		return err
	}
	fmt.Println("wrote", out)
	return writeTableAndPlots(out, report)
}

// rewriteReport redraws the table and plots from an existing JSON file.
func rewriteReport(out string) error {
	data, err := os.ReadFile(out)
	if err != nil {
		return err
	}
	var report Report
	if err := json.Unmarshal(data, &report); err != nil {
		return fmt.Errorf("%s: %w", out, err)
	}
	report.Results = withComparison(report.Results)
	return writeTableAndPlots(out, report)
}

func writeTableAndPlots(out string, report Report) error {
	dir := filepath.Dir(out)
	plots, err := writePlots(dir, report.Results)
	if err != nil {
		return fmt.Errorf("plotting: %w", err)
	}
	md := strings.TrimSuffix(out, filepath.Ext(out)) + ".md"
	if err := os.WriteFile(md, []byte(markdown(report, plots)), 0o644); err != nil {
		return err
	}
	fmt.Println("wrote", md)
	for _, p := range plots {
		fmt.Println("wrote", filepath.Join(dir, p))
	}
	return nil
}

// find returns the first result of scenario whose params match (key,
// value pairs), or nil.
func find(results []Result, scenario string, params ...string) *Result {
	for i := range results {
		r := &results[i]
		if r.Scenario != scenario {
			continue
		}
		ok := true
		for j := 0; j+1 < len(params); j += 2 {
			if fmt.Sprint(r.Params[params[j]]) != params[j+1] {
				ok = false
			}
		}
		if ok {
			return r
		}
	}
	return nil
}

// withComparison adds (or replaces) the "comparison" result: planes per
// GiB of kplane on each datastore against one kube-apiserver per plane.
func withComparison(results []Result) []Result {
	var kept []Result
	for _, r := range results {
		if r.Scenario != "comparison" {
			kept = append(kept, r)
		}
	}
	base := find(kept, "baseline")
	if base == nil || base.Figures["mib_per_plane"] == 0 {
		return kept
	}
	figures := map[string]float64{"baseline_planes_per_gib": base.Figures["planes_per_gib"]}
	params := map[string]any{"baselineInstances": base.Params["instances"]}
	for _, ds := range []string{"sqlite", "etcd"} {
		c := find(kept, "curve", "datastore", ds)
		if c == nil || c.Figures["marginal_rss_mib_per_plane"] <= 0 {
			continue
		}
		params["kplaneBootstrap"] = c.Params["bootstrap"]
		perGiB := 1024 / c.Figures["marginal_rss_mib_per_plane"]
		figures["kplane_"+ds+"_planes_per_gib"] = perGiB
		figures["kplane_"+ds+"_density_ratio"] = perGiB / base.Figures["planes_per_gib"]
		if total := c.Figures["rss_mib_per_plane_total"]; total > 0 {
			figures["kplane_"+ds+"_density_ratio_with_fixed_cost"] = base.Figures["mib_per_plane"] / total
		}
		if p50 := c.Figures["create_to_ready_p50_ms"]; p50 > 0 {
			figures["kplane_"+ds+"_ready_speedup"] = base.Figures["start_to_ready_seconds_mean"] * 1000 / p50
		}
	}
	return append(kept, Result{
		Scenario: "comparison",
		Params:   params,
		Figures:  figures,
		Notes: []string{
			"A kplane plane starts with the RBAC of its --plane-bootstrap (kplaneBootstrap); a kube-apiserver writes the whole upstream bootstrap policy.",
			"planes per GiB: kplane = 1024 / marginal RSS per plane of the curve; baseline = 1024 / (kube-apiserver RSS + etcd RSS / instances).",
			"density_ratio_with_fixed_cost divides by kplane's whole RSS over its planes at the last step instead of the marginal.",
			"ready_speedup: kube-apiserver start-to-ready (mean) over kplane's new-plane create-to-ready p50.",
		},
	})
}

func markdown(report Report, plots []string) string {
	var b strings.Builder
	r := report.Results
	fmt.Fprintf(&b, "# kplane benchmark\n\n%s on %d cores, %d GiB RAM, %s/%s.\n\n",
		report.Date, report.Machine.CPUs, report.Machine.MemoryGB, report.Machine.OS, report.Machine.Arch)
	if report.Command != "" {
		fmt.Fprintf(&b, "```\n%s\n```\n\n", report.Command)
	}
	b.WriteString(sideBySideTable(r))
	for _, p := range plots {
		fmt.Fprintf(&b, "![%s](%s)\n", strings.TrimSuffix(p, ".png"), p)
	}
	if len(plots) > 0 {
		b.WriteString("\n")
	}
	b.WriteString(curveTable(r))
	b.WriteString(fleetTable(r))
	b.WriteString(snapshotTable(r))
	b.WriteString(requestsTable(r))
	b.WriteString(watchTable(r))
	b.WriteString("## Every figure\n\n")
	for _, res := range r {
		b.WriteString(resultTable(res))
	}
	return b.String()
}

// sideBySideTable is the headline: kplane on each datastore against the
// usual model.
func sideBySideTable(results []Result) string {
	sqlite, etcd := find(results, "curve", "datastore", "sqlite"), find(results, "curve", "datastore", "etcd")
	base, cmp := find(results, "baseline"), find(results, "comparison")
	if sqlite == nil && etcd == nil && base == nil {
		return ""
	}
	cols := []*Result{sqlite, etcd}
	var b strings.Builder
	b.WriteString("| | kplane, SQLite | kplane, embedded etcd | one kube-apiserver per plane, shared etcd |\n|---|---|---|---|\n")
	row := func(name string, kplane func(*Result) string, baseline string) {
		fmt.Fprintf(&b, "| %s |", name)
		for _, c := range cols {
			if c == nil {
				b.WriteString(" – |")
			} else {
				fmt.Fprintf(&b, " %s |", kplane(c))
			}
		}
		fmt.Fprintf(&b, " %s |\n", baseline)
	}
	bf := func(key, format string) string {
		if base == nil || base.Figures[key] == 0 {
			if base != nil && base.Params["skipped"] == true {
				return "skipped"
			}
			return "–"
		}
		return fmt.Sprintf(format, base.Figures[key])
	}
	row("memory per plane (RSS)", func(c *Result) string { return fmt.Sprintf("%.3f MiB", c.Figures["marginal_rss_mib_per_plane"]) }, bf("mib_per_plane", "%.0f MiB"))
	row("Go heap per plane", func(c *Result) string { return fmt.Sprintf("%.3f MiB", c.Figures["marginal_heap_mib_per_plane"]) }, bf("kube_apiserver_heap_inuse_mib_mean", "%.0f MiB"))
	row("planes per GiB", func(c *Result) string { return fmt.Sprintf("%.0f", 1024/c.Figures["marginal_rss_mib_per_plane"]) }, bf("planes_per_gib", "%.1f"))
	row("new plane ready p50 / p90 / p99", func(c *Result) string {
		return fmt.Sprintf("%.1f / %.1f / %.1f ms", c.Figures["create_to_ready_p50_ms"], c.Figures["create_to_ready_p90_ms"], c.Figures["create_to_ready_p99_ms"])
	}, bf("start_to_ready_seconds_mean", "%.1f s (start to ready)"))
	if cmp != nil {
		row("density vs one apiserver per plane", func(c *Result) string {
			return fmt.Sprintf("×%.0f", cmp.Figures["kplane_"+fmt.Sprint(c.Params["datastore"])+"_density_ratio"])
		}, "×1")
	}
	b.WriteString("\n")
	if base != nil {
		for _, n := range base.Notes {
			fmt.Fprintf(&b, "- %s\n", n)
		}
		b.WriteString("\n")
	}
	return b.String()
}

func curveTable(results []Result) string {
	var curves []*Result
	for i := range results {
		if results[i].Scenario == "curve" {
			curves = append(curves, &results[i])
		}
	}
	if len(curves) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("## Density curve\n\n| planes |")
	for _, c := range curves {
		fmt.Fprintf(&b, " RSS, %[1]s | Go heap, %[1]s |", c.Params["datastore"])
	}
	b.WriteString("\n|---|" + strings.Repeat("---|---|", len(curves)) + "\n")
	for _, n := range curveSteps(curves) {
		fmt.Fprintf(&b, "| %d |", n)
		for _, c := range curves {
			rss, ok := c.Figures[fmt.Sprintf("rss_mib_at_%d", n)]
			if !ok {
				b.WriteString(" – | – |")
				continue
			}
			fmt.Fprintf(&b, " %.1f MiB | %.1f MiB |", rss, c.Figures[fmt.Sprintf("heap_inuse_mib_at_%d", n)])
		}
		b.WriteString("\n")
	}
	b.WriteString("\n")
	return b.String()
}

// curveSteps are the plane counts measured by any of the curves.
func curveSteps(curves []*Result) []int {
	seen := map[int]bool{}
	var steps []int
	for _, c := range curves {
		for k := range c.Figures {
			if n, ok := strings.CutPrefix(k, "rss_mib_at_"); ok {
				if i, err := strconv.Atoi(n); err == nil && !seen[i] {
					seen[i] = true
					steps = append(steps, i)
				}
			}
		}
	}
	sort.Ints(steps)
	return steps
}

func fleetTable(results []Result) string {
	r := find(results, "fleet")
	if r == nil {
		return ""
	}
	n := r.Params["replicas"]
	return fmt.Sprintf("## Fleet\n\n| | Fleet of %v |\n|---|---|\n"+
		"| apply to `readyReplicas=%v` | %.1f s (%.1f members/s) |\n"+
		"| first member ready | %.2f s |\n"+
		"| RSS after (marginal per member) | %.0f MiB (%.2f MiB) |\n"+
		"| delete to gone | %.1f s |\n\n",
		n, n, r.Figures["apply_to_ready_seconds"], r.Figures["members_ready_per_second"], r.Figures["first_member_ready_ms"]/1000,
		r.Figures["ready_rss_mib"], r.Figures["marginal_rss_mib_per_member"], r.Figures["delete_to_gone_seconds"])
}

func snapshotTable(results []Result) string {
	r := find(results, "snapshot")
	if r == nil {
		return ""
	}
	return fmt.Sprintf("## Snapshot\n\n| | plane of %v objects, %v other planes taking writes |\n|---|---|\n"+
		"| snapshot p50 / p90 / p99 | %.1f / %.1f / %.1f ms |\n"+
		"| snapshot size | %.0f KiB (%.0f bytes per object) |\n"+
		"| snapshots per second / busy writes per second | %.1f / %.0f |\n\n",
		r.Params["objects"], r.Params["busyPlanes"], r.Figures["snapshot_p50_ms"], r.Figures["snapshot_p90_ms"], r.Figures["snapshot_p99_ms"],
		r.Figures["snapshot_bytes"]/1024, r.Figures["snapshot_bytes_per_object"], r.Figures["snapshots_per_second"], r.Figures["busy_writes_per_second"])
}

func requestsTable(results []Result) string {
	r := find(results, "requests")
	if r == nil {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "## Request overhead\n\n| verb | one plane: req/s | p50 | p99 | over %v planes: req/s | p50 | p99 |\n|---|---|---|---|---|---|---|\n", r.Params["planes"])
	for _, v := range []string{"get", "list", "create"} {
		fmt.Fprintf(&b, "| %s |", strings.ToUpper(v))
		for _, half := range []string{"one_plane", "spread"} {
			p := v + "_" + half + "_"
			fmt.Fprintf(&b, " %.0f | %.1f ms | %.1f ms |", r.Figures[p+"per_second"], r.Figures[p+"p50_ms"], r.Figures[p+"p99_ms"])
		}
		b.WriteString("\n")
	}
	b.WriteString("\n")
	return b.String()
}

func watchTable(results []Result) string {
	r := find(results, "watch")
	if r == nil {
		return ""
	}
	var b strings.Builder
	b.WriteString("## Watch fan-out\n\n| watchers | delivery p50 | p99 | deliveries/s | undelivered | server RSS |\n|---|---|---|---|---|---|\n")
	for _, n := range watcherCounts(r) {
		p := fmt.Sprintf("watchers_%d_", n)
		fmt.Fprintf(&b, "| %d | %.1f ms | %.1f ms | %.0f | %.0f | %.0f MiB |\n", n, r.Figures[p+"delivery_p50_ms"], r.Figures[p+"delivery_p99_ms"],
			r.Figures[p+"deliveries_per_second"], r.Figures[p+"undelivered"], r.Figures[p+"server_rss_mib"])
	}
	b.WriteString("\n")
	return b.String()
}

func watcherCounts(r *Result) []int {
	var counts []int
	for k := range r.Figures {
		if rest, ok := strings.CutPrefix(k, "watchers_"); ok && strings.HasSuffix(rest, "_delivery_p50_ms") {
			if n, err := strconv.Atoi(strings.TrimSuffix(rest, "_delivery_p50_ms")); err == nil {
				counts = append(counts, n)
			}
		}
	}
	sort.Ints(counts)
	return counts
}

// resultTable lists every figure of one result.
func resultTable(r Result) string {
	var b strings.Builder
	keys := make([]string, 0, len(r.Params))
	for k := range r.Params {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var params []string
	for _, k := range keys {
		params = append(params, fmt.Sprintf("%s=%v", k, r.Params[k]))
	}
	fmt.Fprintf(&b, "### %s\n\n%s\n\n", r.Scenario, strings.Join(params, ", "))
	names := make([]string, 0, len(r.Figures))
	for k := range r.Figures {
		names = append(names, k)
	}
	sort.Strings(names)
	if len(names) > 0 {
		b.WriteString("| figure | value |\n|---|---|\n")
		for _, k := range names {
			fmt.Fprintf(&b, "| %s | %s |\n", k, strconv.FormatFloat(r.Figures[k], 'g', 5, 64))
		}
		b.WriteString("\n")
	}
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "- %s\n", n)
	}
	if len(r.Notes) > 0 {
		b.WriteString("\n")
	}
	return b.String()
}
