package limits

import (
	"fmt"
	"strings"
)

// Limits is what a plane may use (Plane.spec.limits). A nil field takes
// the server's default; 0 means no limit.
type Limits struct {
	// MaxObjects bounds the records the plane stores, all resources
	// together.
	MaxObjects *int64 `json:"maxObjects,omitempty"`
	// MaxBytes bounds the encoded size of those records.
	MaxBytes *int64 `json:"maxBytes,omitempty"`
	// RequestsPerSecond is the plane's sustained request rate.
	RequestsPerSecond *int32 `json:"requestsPerSecond,omitempty"`
	// RequestBurst is how many requests may come at once above the rate.
	RequestBurst *int32 `json:"requestBurst,omitempty"`
	// MaxWatches bounds the watches open at once in the plane.
	MaxWatches *int32 `json:"maxWatches,omitempty"`
}

// Effective is a plane's limits with the defaults filled in; 0 means no
// limit.
type Effective struct {
	MaxObjects        int64
	MaxBytes          int64
	RequestsPerSecond int32
	RequestBurst      int32
	MaxWatches        int32
}

// Over returns l with every field l leaves out taken from defaults.
func (d Effective) Over(l *Limits) Effective {
	if l == nil {
		return d.withBurst()
	}
	e := d
	if l.MaxObjects != nil {
		e.MaxObjects = *l.MaxObjects
	}
	if l.MaxBytes != nil {
		e.MaxBytes = *l.MaxBytes
	}
	if l.RequestsPerSecond != nil {
		e.RequestsPerSecond = *l.RequestsPerSecond
		// A plane's own rate is not mixed with the default's burst.
		e.RequestBurst = 0
	}
	if l.RequestBurst != nil {
		e.RequestBurst = *l.RequestBurst
	}
	if l.MaxWatches != nil {
		e.MaxWatches = *l.MaxWatches
	}
	return e.withBurst()
}

// withBurst gives a rate without a burst the rate's own burst, at least 1.
func (e Effective) withBurst() Effective {
	if e.RequestsPerSecond > 0 && e.RequestBurst <= 0 {
		e.RequestBurst = max(e.RequestsPerSecond, 1)
	}
	return e
}

// IsZero reports whether nothing is limited.
func (e Effective) IsZero() bool { return e == Effective{} }

// Validate reports what is wrong with defaults given by flags.
func (d Effective) Validate() error {
	var errs []string
	check := func(flag string, v int64) {
		if v < 0 {
			errs = append(errs, fmt.Sprintf("--%s %d must not be negative", flag, v))
		}
	}
	check("plane-max-objects", d.MaxObjects)
	check("plane-max-bytes", d.MaxBytes)
	check("plane-requests-per-second", int64(d.RequestsPerSecond))
	check("plane-request-burst", int64(d.RequestBurst))
	check("plane-max-watches", int64(d.MaxWatches))
	for _, f := range []struct {
		flag  string
		value int32
	}{{"plane-requests-per-second", d.RequestsPerSecond}, {"plane-request-burst", d.RequestBurst}, {"plane-max-watches", d.MaxWatches}} {
		if f.value > 1_000_000 {
			errs = append(errs, fmt.Sprintf("--%s %d must be at most 1000000", f.flag, f.value))
		}
	}
	if d.RequestBurst > 0 && d.RequestsPerSecond == 0 {
		errs = append(errs, "--plane-request-burst needs --plane-requests-per-second")
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return nil
}
