package storage

import "k8s.io/apimachinery/pkg/watch"

// CountEvent counts one event of s as the counting watch does, for the
// tests of the packages that read the counts.
func (c *Counts) CountEvent(s *Store, ev watch.Event) { c.count(s, ev) }
