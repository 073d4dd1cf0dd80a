package main

import (
	"fmt"
	"regexp"
)

// skipRule skips the specs whose full text matches pattern, for reason.
type skipRule struct {
	pattern *regexp.Regexp
	reason  string
}

// defaultSkips are the specs a plane cannot run by design: each needs a Pod
// that serves (a webhook, an aggregated API server), and a plane has no nodes
// to run one. [Slow] specs are left out to keep the run short; the one
// sig-api-machinery conformance spec among them waits ten minutes for a
// continue token to expire after compaction.
var defaultSkips = []skipRule{
	{regexp.MustCompile(`AdmissionWebhook`),
		"deploys the webhook server as a Pod behind a Service; a plane has no nodes to run it"},
	{regexp.MustCompile(`CustomResourceConversionWebhook`),
		"deploys the conversion webhook as a Pod behind a Service; a plane has no nodes to run it"},
	{regexp.MustCompile(`CustomResourceFieldSelectors`),
		"its set-up deploys a conversion webhook as a Pod behind a Service; a plane has no nodes to run it"},
	{regexp.MustCompile(`Aggregator`),
		"deploys the sample API server as a Pod and registers it as an APIService; a plane has no nodes to run it"},
	{slowPattern,
		"[Slow]: left out to keep the run short (the chunking spec waits 10 minutes for a continue token to expire; CONFORMANCE_SLOW=1 runs it)"},
}

// skipReason returns why text is skipped by rules, or "" when it runs.
func skipReason(rules []skipRule, text string) string {
	for _, r := range rules {
		if r.pattern.MatchString(text) {
			return r.reason
		}
	}
	return ""
}

// slowPattern marks the specs that wait minutes on purpose.
var slowPattern = regexp.MustCompile(`\[Slow\]`)

// skipRules is defaultSkips (without the [Slow] rule when slow) plus the
// specs extra (a regular expression, may be empty) matches.
func skipRules(extra string, slow bool) ([]skipRule, error) {
	var rules []skipRule
	for _, r := range defaultSkips {
		if slow && r.pattern.String() == slowPattern.String() {
			continue
		}
		rules = append(rules, r)
	}
	if extra == "" {
		return rules, nil
	}
	re, err := regexp.Compile(extra)
	if err != nil {
		return nil, fmt.Errorf("--skip: %w", err)
	}
	return append(rules, skipRule{re, "skipped on request (--skip / CONFORMANCE_SKIP)"}), nil
}
