package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"

	"github.com/onsi/ginkgo/v2/types"
)

// spec is one focused spec of the suite.
type spec struct {
	Text   string // full text: container texts and the It's, joined by spaces
	Serial bool   // [Serial] or [Disruptive]: runs alone
}

// listSpecs returns the specs focus selects, from a dry run of e2e.test.
func listSpecs(ctx context.Context, cfg config, focus string) ([]spec, error) {
	report := filepath.Join(cfg.outDir, "list.json")
	logPath := filepath.Join(cfg.outDir, "list.log")
	args := append(cfg.e2eArgs(), "--ginkgo.dry-run", "--ginkgo.focus="+focus, "--ginkgo.json-report="+report)
	out, err := exec.CommandContext(ctx, cfg.e2eBinary, args...).CombinedOutput()
	if werr := os.WriteFile(logPath, out, 0o644); werr != nil {
		return nil, werr
	}
	if err != nil {
		return nil, fmt.Errorf("listing specs (dry run, output in %s): %w", logPath, err)
	}
	reports, err := readReports(report)
	if err != nil {
		return nil, err
	}
	var specs []spec
	for _, r := range reports {
		for _, s := range r.SpecReports {
			if s.LeafNodeType != types.NodeTypeIt || s.State == types.SpecStateSkipped {
				continue
			}
			text := s.FullText()
			serial := strings.Contains(text, "[Serial]") || strings.Contains(text, "[Disruptive]")
			specs = append(specs, spec{Text: text, Serial: serial})
		}
	}
	if len(specs) == 0 {
		return nil, fmt.Errorf("focus %q selects no spec (dry run output in %s)", focus, logPath)
	}
	sort.Slice(specs, func(i, j int) bool { return specs[i].Text < specs[j].Text })
	return specs, nil
}

// readReports reads a Ginkgo JSON report.
func readReports(path string) ([]types.Report, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the ginkgo report: %w", err)
	}
	var reports []types.Report
	if err := json.Unmarshal(data, &reports); err != nil {
		return nil, fmt.Errorf("decoding the ginkgo report %s: %w", path, err)
	}
	return reports, nil
}
