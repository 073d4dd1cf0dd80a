package informers

import (
	"testing"

	"k8s.io/apimachinery/pkg/watch"
)

// TestTellDeletesOnlyHeldObjects: the informer hears of a deletion only for
// an object it was given; client-go would hand any other to the handlers.
func TestTellDeletesOnlyHeldObjects(t *testing.T) {
	s := &source{}
	steps := []struct {
		event watch.EventType
		key   string
		want  bool
	}{
		{watch.Deleted, "p|default/never-seen", false},
		{watch.Added, "p|default/web", true},
		{watch.Modified, "p|default/web", true},
		{watch.Deleted, "p|default/web", true},
		{watch.Deleted, "p|default/web", false},
	}
	for i, step := range steps {
		if got := s.tell(step.event, "p", step.key, nil, false); got != step.want {
			t.Fatalf("step %d: tell(%s, %s) = %v, want %v", i, step.event, step.key, got, step.want)
		}
	}
}
