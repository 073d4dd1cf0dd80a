package storage

import (
	"sync/atomic"
	"testing"
)

// A record's revision reaches the storages under its key's prefix, and
// only those: a resource's, or a group's resource's, never another
// resource that begins with the same letters.
func TestObservedRevisionsFollowTheirPrefix(t *testing.T) {
	var o observedRevisions
	var pods, podTemplates, deployments, deployments2 atomic.Uint64
	o.add(recordsPrefix("/registry/", "/pods"), &pods)
	o.add(recordsPrefix("/registry/", "/podtemplates"), &podTemplates)
	o.add(recordsPrefix("/registry/", "/apps/deployments"), &deployments)
	o.add(recordsPrefix("/registry/", "/apps/deployments"), &deployments2)

	o.saw([]byte("/registry/pods/p/ns/web-0"), 7)
	o.saw([]byte("/registry/apps/deployments/p/ns/web"), 9)
	o.saw([]byte("/registry/pods/p/ns/web-1"), 5)
	o.saw([]byte("/registry/configmaps/p/ns/c"), 11)
	if pods.Load() != 7 || podTemplates.Load() != 0 || deployments.Load() != 9 || deployments2.Load() != 9 {
		t.Fatalf("pods %d, podtemplates %d, deployments %d and %d; want 7, 0, 9 and 9",
			pods.Load(), podTemplates.Load(), deployments.Load(), deployments2.Load())
	}
	o.remove(recordsPrefix("/registry/", "/apps/deployments"), &deployments)
	o.saw([]byte("/registry/apps/deployments/p/ns/web"), 12)
	if deployments.Load() != 9 || deployments2.Load() != 12 {
		t.Fatalf("after a storage went: deployments %d and %d, want 9 and 12", deployments.Load(), deployments2.Load())
	}
}
