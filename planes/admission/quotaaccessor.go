package admission

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/lru"

	"kplane.dev/kplane/planes"
)

// planeNamespace qualifies a namespace with its plane. Neither holds a
// slash (both are DNS labels), so the pair is unambiguous.
func planeNamespace(plane, namespace string) string { return plane + "/" + namespace }

func splitPlaneNamespace(key string) (plane, namespace string, ok bool) {
	return strings.Cut(key, "/")
}

// quotaUpdateTimeout bounds one write of a quota's usage.
const quotaUpdateTimeout = 10 * time.Second

// quotaAccessor is upstream's QuotaAccessor for plane-qualified
// namespaces. The quotas it hands out carry the plane-qualified namespace
// (upstream reads them again by that namespace when an update conflicts);
// it writes their usage into their plane. Like upstream's, it remembers the
// quotas it wrote until the cache has caught up with them, so that
// back-to-back requests do not conflict on a stale copy.
type quotaAccessor struct {
	quotas  QuotaLister
	client  kubernetes.Interface
	updated *lru.Cache
}

func newQuotaAccessor(quotas QuotaLister) *quotaAccessor {
	return &quotaAccessor{quotas: quotas, updated: lru.New(1000)}
}

// GetQuotas implements upstream's QuotaAccessor.
func (q *quotaAccessor) GetQuotas(key string) ([]corev1.ResourceQuota, error) {
	plane, namespace, ok := splitPlaneNamespace(key)
	if !ok {
		return nil, fmt.Errorf("resource quota: namespace %q is not plane-qualified", key)
	}
	items, err := q.quotas.ListQuotas(planes.WithPlane(context.Background(), plane), plane, namespace)
	if err != nil {
		return nil, fmt.Errorf("error resolving quota: %w", err)
	}
	for i := range items {
		items[i].Namespace = key
		items[i] = *q.newest(&items[i])
	}
	return items, nil
}

var versioner = storage.APIObjectVersioner{}

// newest returns the quota or the newer copy this accessor wrote.
func (q *quotaAccessor) newest(quota *corev1.ResourceQuota) *corev1.ResourceQuota {
	key := quota.Namespace + "/" + quota.Name
	cached, ok := q.updated.Get(key)
	if !ok {
		return quota
	}
	written := cached.(*corev1.ResourceQuota)
	if versioner.CompareResourceVersion(quota, written) >= 0 {
		q.updated.Remove(key)
		return quota
	}
	return written.DeepCopy()
}

// UpdateQuotaStatus implements upstream's QuotaAccessor: the usage is
// written into the quota's plane.
func (q *quotaAccessor) UpdateQuotaStatus(quota *corev1.ResourceQuota) error {
	key := quota.Namespace
	plane, namespace, ok := splitPlaneNamespace(key)
	if !ok {
		return fmt.Errorf("resource quota: namespace %q is not plane-qualified", key)
	}
	out := quota.DeepCopy()
	out.Namespace = namespace
	ctx, cancel := context.WithTimeout(planes.WithPlane(context.Background(), plane), quotaUpdateTimeout)
	defer cancel()
	updated, err := q.client.CoreV1().ResourceQuotas(namespace).UpdateStatus(ctx, out, metav1.UpdateOptions{})
	if err != nil {
		return err
	}
	updated.Namespace = key
	q.updated.Add(key+"/"+updated.Name, updated)
	return nil
}
