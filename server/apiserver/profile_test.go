package apiserver

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
)

// TestResourceConfigOfProfiles: the generic profile's resource config
// enables the documented core resources and groups and nothing that needs
// nodes or workloads; the full profile's keeps them all.
func TestResourceConfigOfProfiles(t *testing.T) {
	generic, full := resourceConfig(ProfileGeneric), resourceConfig(ProfileFull)
	for _, r := range genericCoreResources {
		gvr := corev1.SchemeGroupVersion.WithResource(r)
		if !generic.ResourceEnabled(gvr) || !full.ResourceEnabled(gvr) {
			t.Errorf("core %s: generic %v, full %v; want both enabled", r, generic.ResourceEnabled(gvr), full.ResourceEnabled(gvr))
		}
	}
	for _, r := range workloadCoreResources {
		gvr := corev1.SchemeGroupVersion.WithResource(r)
		if generic.ResourceEnabled(gvr) || !full.ResourceEnabled(gvr) {
			t.Errorf("core %s: generic %v, full %v; want only full", r, generic.ResourceEnabled(gvr), full.ResourceEnabled(gvr))
		}
	}
	for gv, enabled := range generic.GroupVersionConfigs {
		if enabled && gv.Group != "" && !genericGroups[gv.Group] {
			t.Errorf("generic enables %s, a group it does not serve", gv)
		}
	}
	if gvr := appsv1.SchemeGroupVersion.WithResource("deployments"); generic.ResourceEnabled(gvr) || !full.ResourceEnabled(gvr) {
		t.Errorf("apps/v1 deployments: generic %v, full %v", generic.ResourceEnabled(gvr), full.ResourceEnabled(gvr))
	}
	if gvr := rbacv1.SchemeGroupVersion.WithResource("roles"); !generic.ResourceEnabled(gvr) {
		t.Error("generic does not enable rbac.authorization.k8s.io/v1 roles")
	}
}

func TestParseProfile(t *testing.T) {
	for in, want := range map[string]Profile{"": ProfileFull, "full": ProfileFull, "generic": ProfileGeneric} {
		if got, err := ParseProfile(in); err != nil || got != want {
			t.Errorf("ParseProfile(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := ParseProfile("minimal"); err == nil {
		t.Error("ParseProfile(minimal): want an error")
	}
}
