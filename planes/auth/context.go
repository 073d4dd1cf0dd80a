package auth

import (
	"context"

	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
)

func withNamespace(ctx context.Context, namespace string) context.Context {
	return genericapirequest.WithNamespace(ctx, namespace)
}
