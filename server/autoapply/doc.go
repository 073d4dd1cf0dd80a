// Package autoapply keeps the manifests of a directory applied, k3s-style:
// every YAML or JSON file in --manifests-dir (default <data-dir>/manifests,
// subdirectories included, dotfiles skipped, files in path order) is applied
// when the server starts and again whenever its content changes.
//
//   - A file may hold several documents (---) and v1 Lists.
//   - Objects go to the root plane. A document-level `plane: <id>` key or a
//     kplane.dev/plane annotation sends an object to plane <id>; both are
//     removed before the object is applied (the storage layer owns that
//     annotation). A plane that does not exist is created through its
//     Plane object, like `kplane planes create` does.
//   - Objects are applied with server-side apply as field manager
//     kplane-manifests, forcing conflicts: the directory is the operator's
//     word and wins over other managers, as k3s does for its manifests.
//   - Kinds are mapped with each plane's discovery. A manifest may define a
//     CustomResourceDefinition and then objects of it: those wait until the
//     plane serves the new kind.
//   - Changes are found by polling (a content hash per file). A file that
//     fails is logged with its name and retried with backoff; it never stops
//     the other files or the server.
//   - Deleting a file leaves its objects in place (as k3s does); delete
//     them through the API.
package autoapply
