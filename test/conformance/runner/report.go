package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// summary is the whole run: counts and every spec's result.
type summary struct {
	Selected int      `json:"selected"`
	Passed   int      `json:"passed"`
	Failed   int      `json:"failed"`
	Skipped  int      `json:"skipped"`
	Minutes  float64  `json:"minutes"`
	Results  []result `json:"results"`
}

func summarize(results []result, took time.Duration) summary {
	sum := summary{Selected: len(results), Results: results, Minutes: float64(took.Round(6*time.Second)) / float64(time.Minute)}
	for _, r := range results {
		switch r.Outcome {
		case outcomePassed:
			sum.Passed++
		case outcomeSkipped:
			sum.Skipped++
		default:
			sum.Failed++
		}
	}
	return sum
}

// writeResults writes results.json and results.md into dir.
func writeResults(dir string, sum summary) error {
	data, err := json.MarshalIndent(sum, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "results.json"), append(data, '\n'), 0o644); err != nil {
		return fmt.Errorf("writing results.json: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "results.md"), []byte(markdown(sum)), 0o644); err != nil {
		return fmt.Errorf("writing results.md: %w", err)
	}
	return nil
}

// markdown is the results table: failures first, then skips, then passes.
func markdown(sum summary) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d specs selected: %d passed, %d failed, %d skipped, in %.1f minutes.\n\n",
		sum.Selected, sum.Passed, sum.Failed, sum.Skipped, sum.Minutes)
	b.WriteString("| spec | result | seconds | reason |\n|---|---|---|---|\n")
	for _, outcome := range []string{outcomeFailed, outcomeSkipped, outcomePassed} {
		for _, r := range sum.Results {
			if r.Outcome != outcome {
				continue
			}
			state := r.Outcome
			if r.State != "" && r.State != r.Outcome {
				state += " (" + r.State + ")"
			}
			fmt.Fprintf(&b, "| %s | %s | %.0f | %s |\n", cell(strings.TrimPrefix(r.Spec, "[sig-api-machinery] ")), state, r.Seconds, cell(r.Reason))
		}
	}
	return b.String()
}

// cell makes s safe inside a Markdown table cell.
func cell(s string) string {
	return strings.NewReplacer("|", `\|`, "\n", " ").Replace(s)
}
