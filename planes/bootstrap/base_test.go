package bootstrap

import (
	"net"
	"testing"

	"kplane.dev/kplane/planes"
)

func TestBaseIDFollowsContent(t *testing.T) {
	config := Config{CACert: []byte("ca"), ServiceIP: net.ParseIP("10.96.0.1"), ServicePort: 6443, Policy: FullPolicy}
	a, b := New(config), New(config)
	if a.BaseID() != b.BaseID() {
		t.Fatalf("the same bootstrap has two base ids: %s, %s", a.BaseID(), b.BaseID())
	}
	if !planes.IsBase(a.BaseID()) || planes.ValidateID(a.BaseID()) == nil {
		t.Fatalf("base id %q must be a base and never a plane id", a.BaseID())
	}
	for name, changed := range map[string]Config{
		"CA":      {CACert: []byte("other"), ServiceIP: config.ServiceIP, ServicePort: 6443, Policy: FullPolicy},
		"policy":  {CACert: config.CACert, ServiceIP: config.ServiceIP, ServicePort: 6443, Policy: MinimalPolicy},
		"service": {CACert: config.CACert, ServiceIP: net.ParseIP("10.0.0.1"), ServicePort: 6443, Policy: FullPolicy},
	} {
		if New(changed).BaseID() == a.BaseID() {
			t.Errorf("another %s, the same base id", name)
		}
	}
}
