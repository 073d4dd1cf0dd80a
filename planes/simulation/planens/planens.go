// Package planens folds a plane into the namespace (or, for cluster-scoped
// objects, the name) that upstream controllers see: `<plane>|<namespace>`.
//
// Upstream controllers key their work, expectations and listers by
// namespace/name. Giving them objects whose namespace carries the plane
// lets one instance of each controller serve every plane without a fork:
// same-named objects of two planes are two keys, and every write the
// controller makes names the plane it belongs to. `|` cannot occur in a
// plane id, a namespace or a node name (DNS labels and subdomains), so the
// folding is unambiguous and can never collide with a real name.
package planens

import "strings"

// Separator joins a plane and a namespace or name.
const Separator = "|"

// Join folds plane into s.
func Join(plane, s string) string { return plane + Separator + s }

// Split undoes Join; ok is false when s carries no plane.
func Split(s string) (plane, rest string, ok bool) {
	plane, rest, ok = strings.Cut(s, Separator)
	if !ok || plane == "" {
		return "", s, false
	}
	return plane, rest, true
}

// Plane returns the plane folded into s, or "".
func Plane(s string) string {
	plane, _, _ := Split(s)
	return plane
}

// Strip returns s without its plane.
func Strip(s string) string {
	_, rest, _ := Split(s)
	return rest
}
