package bootstrap

import (
	"testing"

	flowcontrolbootstrap "k8s.io/apiserver/pkg/apis/flowcontrol/bootstrap"
)

func countByResource(p Policy) map[string]int {
	n := map[string]int{}
	for _, o := range policyObjects(p) {
		n[o.resource]++
	}
	return n
}

func TestFullPolicyHasUpstreamFlowControl(t *testing.T) {
	full := countByResource(FullPolicy)
	wantLevels := len(flowcontrolbootstrap.MandatoryPriorityLevelConfigurations) + len(flowcontrolbootstrap.SuggestedPriorityLevelConfigurations)
	wantSchemas := len(flowcontrolbootstrap.MandatoryFlowSchemas) + len(flowcontrolbootstrap.SuggestedFlowSchemas)
	if full["prioritylevelconfigurations"] != wantLevels || full["flowschemas"] != wantSchemas {
		t.Fatalf("full policy: %d levels, %d schemas; want %d, %d", full["prioritylevelconfigurations"], full["flowschemas"], wantLevels, wantSchemas)
	}
	minimal := countByResource(MinimalPolicy)
	if minimal["prioritylevelconfigurations"] != 0 || minimal["flowschemas"] != 0 {
		t.Fatalf("minimal policy writes flow control objects: %v", minimal)
	}
}

func TestFlowControlObjectsAreCopies(t *testing.T) {
	objects := flowControlObjects()
	for _, o := range objects {
		for _, shared := range flowcontrolbootstrap.MandatoryFlowSchemas {
			if o.object == shared {
				t.Fatalf("%s is upstream's shared value, not a copy", shared.Name)
			}
		}
	}
}
