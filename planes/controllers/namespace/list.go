package namespace

import "k8s.io/apiserver/pkg/storage"

// storageListFromCache lists a namespace's objects of one resource from the
// shared watch cache (resourceVersion 0), without reading the datastore.
var storageListFromCache = storage.ListOptions{ResourceVersion: "0", Recursive: true, Predicate: storage.Everything}
