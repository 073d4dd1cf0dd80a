package apiserver

import (
	"fmt"

	planestorage "kplane.dev/kplane/planes/storage"
	"kplane.dev/kplane/planes/webhooks"
)

// WebhookConfig configures how planes' admission webhooks are called.
type WebhookConfig struct {
	// EgressAllow, when not empty, are the only CIDRs webhooks may be
	// called at; EgressDeny are refused on top of what is always refused.
	EgressAllow []string
	EgressDeny  []string
	// Datastore are the datastore's endpoints, never reachable.
	Datastore []string
	// MaxInFlightPerPlane bounds one plane's webhook calls in flight.
	MaxInFlightPerPlane int
}

// webhookPlugins are the admission webhook plugins of every plane.
type webhookPlugins struct {
	validating webhooks.Validating
	mutating   webhooks.Mutating
	// egress is the policy of every webhook call, conversion webhooks'
	// included.
	egress *webhooks.EgressPolicy
}

// newWebhookPlugins builds the webhook plugins with the egress policy of
// c.
func (c *Config) newWebhookPlugins(stores *planestorage.Registry) (webhookPlugins, error) {
	allow, err := webhooks.ParsePrefixes(c.Webhooks.EgressAllow)
	if err != nil {
		return webhookPlugins{}, fmt.Errorf("webhook egress allow list: %w", err)
	}
	deny, err := webhooks.ParsePrefixes(c.Webhooks.EgressDeny)
	if err != nil {
		return webhookPlugins{}, fmt.Errorf("webhook egress deny list: %w", err)
	}
	egress := &webhooks.EgressPolicy{Allow: allow, Deny: deny, Datastore: c.Webhooks.Datastore}
	config := webhooks.Config{Registry: stores, Egress: egress, MaxInFlightPerPlane: c.Webhooks.MaxInFlightPerPlane}
	return webhookPlugins{validating: webhooks.NewValidating(config), mutating: webhooks.NewMutating(config), egress: egress}, nil
}
