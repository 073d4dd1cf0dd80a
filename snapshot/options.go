package snapshot

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Options are the query parameters of GET /snapshot.
type Options struct {
	// Resources are the resource= names as given (repeatable or
	// comma-separated); empty means every resource.
	Resources []string
	// IncludeEmpty keeps resources without items in the response.
	IncludeEmpty bool
	// Warm builds the caches of every selected resource that has none yet
	// (custom resources) and waits until they are synced.
	Warm bool
	// Namespace restricts the snapshot to namespaced resources, in one
	// namespace.
	Namespace string
	// LabelSelector selects the items.
	LabelSelector labels.Selector
	// Watch asks for the delta stream.
	Watch bool
	// ResourceVersion is where a delta stream starts ("" or "0": with the
	// current state, as ADDED events).
	ResourceVersion uint64
	// Timeout ends a delta stream (0: none).
	Timeout time.Duration
}

// ParseOptions reads and validates the query of a snapshot request. Its
// errors are meant for the client (a 400 answer).
func ParseOptions(q url.Values) (Options, error) {
	var o Options
	for _, v := range q["resource"] {
		for _, name := range strings.Split(v, ",") {
			if name = strings.TrimSpace(name); name != "" {
				o.Resources = append(o.Resources, name)
			}
		}
	}
	var err error
	if o.IncludeEmpty, err = parseBool(q, "includeEmpty"); err != nil {
		return o, err
	}
	if o.Warm, err = parseBool(q, "warm"); err != nil {
		return o, err
	}
	if o.Watch, err = parseBool(q, "watch"); err != nil {
		return o, err
	}
	if ns := q.Get("namespace"); ns != "" {
		if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
			return o, fmt.Errorf("namespace %q: %s", ns, strings.Join(errs, "; "))
		}
		o.Namespace = ns
	}
	o.LabelSelector = labels.Everything()
	if sel := q.Get("labelSelector"); sel != "" {
		if o.LabelSelector, err = labels.Parse(sel); err != nil {
			return o, fmt.Errorf("labelSelector %q: %v", sel, err)
		}
	}
	if rv := q.Get("resourceVersion"); rv != "" {
		if !o.Watch {
			return o, fmt.Errorf("resourceVersion is where a delta stream starts: use it with watch=true")
		}
		if o.ResourceVersion, err = strconv.ParseUint(rv, 10, 64); err != nil {
			return o, fmt.Errorf("resourceVersion %q: want the resourceVersion of a snapshot", rv)
		}
	}
	if t := q.Get("timeoutSeconds"); t != "" {
		n, err := strconv.ParseUint(t, 10, 32)
		if err != nil {
			return o, fmt.Errorf("timeoutSeconds %q: want a number of seconds", t)
		}
		o.Timeout = time.Duration(n) * time.Second
	}
	return o, nil
}

func parseBool(q url.Values, name string) (bool, error) {
	v := q.Get(name)
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("%s=%q: want true or false", name, v)
	}
	return b, nil
}

// isWatch reports whether a query asks for the delta stream; malformed
// values are left to ParseOptions.
func isWatch(q url.Values) bool {
	b, _ := strconv.ParseBool(q.Get("watch"))
	return b
}
