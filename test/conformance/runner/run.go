package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/onsi/ginkgo/v2/types"
)

// Outcomes of a spec, as the table shows them.
const (
	outcomePassed  = "passed"
	outcomeFailed  = "failed"
	outcomeSkipped = "skipped"
)

// result is what became of one spec.
type result struct {
	Spec     string  `json:"spec"`
	Outcome  string  `json:"outcome"`         // passed, failed or skipped
	State    string  `json:"state,omitempty"` // ginkgo's state: failed, timedout, panicked, ...
	Reason   string  `json:"reason,omitempty"`
	Seconds  float64 `json:"seconds,omitempty"`
	Log      string  `json:"log,omitempty"`
	Location string  `json:"location,omitempty"` // where it failed, file:line
}

// killGrace is how long past its own suite timeout (and Ginkgo's grace period
// for clean-up) a spec process may live before it is killed.
const killGrace = 90 * time.Second

// runSpec runs one spec in its own e2e.test process, with the per-spec
// timeout as the suite timeout, and reads its outcome from its JSON report.
func runSpec(ctx context.Context, cfg config, s spec, index int) result {
	base := filepath.Join(cfg.outDir, "specs", fmt.Sprintf("%03d", index))
	report, logPath := base+".json", base+".log"
	res := result{Spec: s.Text, Log: logPath}
	logFile, err := os.Create(logPath)
	if err != nil {
		return res.failed("runner", err.Error())
	}
	defer logFile.Close()

	timeout := cfg.specTimeout
	if slowPattern.MatchString(s.Text) {
		timeout = cfg.slowTimeout
	}
	args := append(cfg.e2eArgs(),
		"--ginkgo.focus="+regexp.QuoteMeta(s.Text)+"$",
		"--ginkgo.timeout="+timeout.String(),
		"--ginkgo.poll-progress-after="+(timeout/2).String(),
		"--ginkgo.json-report="+report,
		"--ginkgo.v")
	runCtx, cancel := context.WithTimeout(ctx, timeout+killGrace)
	defer cancel()
	cmd := exec.CommandContext(runCtx, cfg.e2eBinary, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// Kill the whole process group: a spec may have started kubectl.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	start := time.Now()
	runErr := cmd.Run()
	res.Seconds = time.Since(start).Round(time.Second).Seconds()

	if runCtx.Err() != nil && ctx.Err() == nil {
		return res.failed("killed", fmt.Sprintf("killed: still running %s after the spec timeout of %s", killGrace, timeout))
	}
	reports, err := readReports(report)
	if err != nil {
		return res.failed("no report", fmt.Sprintf("e2e.test wrote no report (%v): %v", runErr, err))
	}
	return res.from(reports, timeout)
}

// from fills res from the spec's report.
func (res result) from(reports []types.Report, timeout time.Duration) result {
	var its []types.SpecReport
	var suiteFailure *types.SpecReport
	for _, r := range reports {
		for i, s := range r.SpecReports {
			switch {
			case s.LeafNodeType == types.NodeTypeIt && s.State != types.SpecStateSkipped:
				its = append(its, s)
			case s.LeafNodeType == types.NodeTypeIt && s.State == types.SpecStateSkipped && s.Failure.Message != "":
				its = append(its, s) // skipped by the spec itself, with its reason
			case s.LeafNodeType != types.NodeTypeIt && s.State.Is(types.SpecStateFailureStates):
				suiteFailure = &r.SpecReports[i]
			}
		}
	}
	if suiteFailure != nil && len(its) == 0 {
		return res.failed(suiteFailure.State.String(), suiteFailure.LeafNodeType.String()+": "+firstLine(suiteFailure.Failure.Message))
	}
	if len(its) != 1 {
		return res.failed("runner", fmt.Sprintf("the focus ran %d specs, want 1", len(its)))
	}
	s := its[0]
	res.State = s.State.String()
	switch {
	case s.State == types.SpecStatePassed:
		res.Outcome = outcomePassed
	case s.State == types.SpecStateSkipped:
		res.Outcome, res.Reason = outcomeSkipped, "skipped by the spec: "+firstLine(s.Failure.Message)
	default:
		res = res.failed(s.State.String(), failureReason(s, timeout))
		res.Location = s.Failure.Location.String()
	}
	return res
}

// failureReason is the first line of a spec's failure, and for a spec cut
// off by the timeout the step it was in.
func failureReason(s types.SpecReport, timeout time.Duration) string {
	msg := firstLine(s.Failure.Message)
	if s.State == types.SpecStateTimedout || s.State == types.SpecStateInterrupted {
		if strings.Contains(msg, "suite timeout") {
			msg = "no verdict within the spec timeout of " + timeout.String()
		}
		if step := s.Failure.ProgressReport.CurrentStepText; step != "" {
			msg += " (at step: " + step + ")"
		}
	}
	return msg
}

func (res result) failed(state, reason string) result {
	res.Outcome, res.State, res.Reason = outcomeFailed, state, reason
	return res
}

// firstLine is the first non-empty line of msg, at most 300 characters.
func firstLine(msg string) string {
	for _, line := range strings.Split(msg, "\n") {
		if line = strings.TrimSpace(line); line != "" {
			if len(line) > 300 {
				line = line[:300] + "…"
			}
			return line
		}
	}
	return ""
}
