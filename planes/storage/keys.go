package storage

import (
	"context"
	"fmt"
	"path"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apiserver/pkg/storage/storagebackend"

	"kplane.dev/kplane/planes"
)

// scopeKey inserts plane right after resourcePrefix in key. Keys handed to
// storage by the generic registry always start with the resource prefix
// ("/pods", "/pods/<ns>", "/pods/<ns>/<name>").
func scopeKey(resourcePrefix, plane, key string) (string, error) {
	rest, ok := strings.CutPrefix(key, resourcePrefix)
	if !ok || (rest != "" && !strings.HasPrefix(rest, "/")) {
		return "", fmt.Errorf("storage key %q is outside resource prefix %q", key, resourcePrefix)
	}
	return resourcePrefix + "/" + plane + rest, nil
}

// errCrossPlaneKey: the cross-plane view covers whole resources only.
func errCrossPlaneKey(resourcePrefix, key string) error {
	return apierrors.NewInternalError(fmt.Errorf("cross-plane access to %s must list or watch the whole resource, not %q", resourcePrefix, key))
}

// planeOf returns the plane of ctx or an error that refuses the call: a
// storage call without a plane never falls back to a global key.
func planeOf(ctx context.Context, resourcePrefix string) (string, error) {
	plane, ok := planes.FromContext(ctx)
	if !ok {
		return "", apierrors.NewInternalError(fmt.Errorf("storage call for %s without a plane refused", resourcePrefix))
	}
	return plane, nil
}

// datastoreKeyPrefix is the prefix the etcd storage puts before a storage
// key (etcd3.New: the configured prefix, rooted, ending in "/").
func datastoreKeyPrefix(config *storagebackend.ConfigForResource) string {
	if config == nil {
		return "/"
	}
	prefix := path.Join("/", config.Prefix)
	if !strings.HasSuffix(prefix, "/") {
		prefix += "/"
	}
	return prefix
}

// DatastoreKey is the datastore's key of plane's object at storage key
// key ("/configmaps/<ns>/<name>"): the key the etcd storage reads and
// writes it at.
func (s *Store) DatastoreKey(plane, key string) (string, error) {
	scoped, err := scopeKey(s.resourcePrefix, plane, key)
	if err != nil {
		return "", err
	}
	return s.keyPrefix + strings.TrimPrefix(scoped, "/"), nil
}
