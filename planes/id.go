package planes

import (
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Root is the plane served on the bare paths (no /clusters/<id>/control-plane
// prefix). It is a plane like any other; it also holds the Plane and Fleet
// objects that describe the others.
const Root = "root"

// Annotation is stamped by the storage layer on every object it writes. It is
// how a cached object (which carries no storage key) is mapped back to its
// plane. Clients cannot set, change or remove it: every write overwrites it.
const Annotation = "kplane.dev/plane"

// MaxIDLength is the longest plane id: a DNS-1123 label.
const MaxIDLength = validation.DNS1123LabelMaxLength

// ValidateID returns nil when id is a valid plane id (a DNS-1123 label: lower
// case alphanumerics and '-', starting and ending with an alphanumeric, at most
// 63 characters), and an error that says why not otherwise.
func ValidateID(id string) error {
	if id == "" {
		return fmt.Errorf("plane id must not be empty")
	}
	if errs := validation.IsDNS1123Label(id); len(errs) > 0 {
		return fmt.Errorf("invalid plane id %q: %s", truncate(id, 80), strings.Join(errs, "; "))
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// Path returns the URL path prefix that serves plane id: "" for the root
// plane, /clusters/<id>/control-plane otherwise.
func Path(id string) string {
	if id == Root {
		return ""
	}
	return "/clusters/" + id + "/control-plane"
}

// BasePrefix starts the id of a base plane: the server's own template of
// the bootstrap objects every plane made from nothing starts with. A dot
// is not allowed in a plane id, so no request and no Plane can name one.
const BasePrefix = "base."

// BaseAnnotation on a Plane names the base plane it is made from. The
// server sets it when the Plane is created; it never changes.
const BaseAnnotation = "kplane.dev/base"

// IsBase reports whether id is a base plane.
func IsBase(id string) bool { return strings.HasPrefix(id, BasePrefix) }

// namesShown is how many names a message lists before it counts the rest.
const namesShown = 5

// DescribeNames lists names for a message, sorted, the first few in full
// and the rest as a count ("a, b, c, d, e and 3 more"): a template with
// a thousand members, or many servers, must not make a message of them
// all.
func DescribeNames(names []string) string {
	sorted := slices.Sorted(slices.Values(names))
	if len(sorted) <= namesShown {
		return strings.Join(sorted, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(sorted[:namesShown], ", "), len(sorted)-namesShown)
}

// AdminServiceAccount is the ServiceAccount, in a plane's kube-system, whose
// tokens `kplane kubeconfig` hands out; a ClusterRoleBinding of the same
// name makes it cluster-admin inside its plane. It is the plane's access,
// not its state: a reset keeps it.
const AdminServiceAccount = "kplane-admin"
