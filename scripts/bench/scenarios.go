package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
)

type scenariosParams struct {
	// Objects in the template (over ten kinds, fillScenario).
	Objects int
	// Members of the Fleet made from the template.
	Members int
	// CopyMembers are made the copying way (a plain plane, then every
	// object applied), fewer: each costs Objects writes.
	CopyMembers int
	// Changes a member makes before each of Resets resets.
	Changes, Resets int
	// Old is an earlier binary whose resets and Fleet are measured the
	// same way, Rounds times each in turns.
	Old    string
	Rounds int
	// ProfileDir, when set, receives a CPU profile of the server while
	// the Fleet's members are made.
	ProfileDir string
}

// scenariosScenario measures planes as layers side by side with the
// copying path, on one server: a template of Objects objects; a Fleet of
// Members members of it (apply to ready, datastore revisions written per
// member, marginal RSS per member) against CopyMembers planes that get
// the same objects applied; and Resets resets of a member after Changes
// changes, against delete + create + re-apply of a copied plane.
func scenariosScenario(binary string, p scenariosParams) (Result, error) {
	s, err := startServer(binary)
	if err != nil {
		return Result{}, err
	}
	defer s.stop()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	root, err := dynamic.NewForConfig(s.config("root"))
	if err != nil {
		return Result{}, err
	}
	figures := map[string]float64{}
	if err := scenarioTemplate(ctx, s, root, p.Objects); err != nil {
		return Result{}, err
	}
	if err := layeredMembers(ctx, s, root, p, figures); err != nil {
		return Result{}, err
	}
	if err := fleetSimulationChange(ctx, root, p.Members, figures); err != nil {
		return Result{}, err
	}
	if err := copiedMembers(ctx, s, root, p, figures); err != nil {
		return Result{}, err
	}
	if err := resets(ctx, s, root, p, figures); err != nil {
		return Result{}, err
	}
	// Stopped (again by the defer, harmlessly) so that the old binary's
	// server has the cores to itself.
	s.stop()
	if p.Old != "" {
		// Side by side, each binary on a server of its own: the template
		// and the member that is reset, nothing else.
		if err := resetsAlone(binary, "", p, figures); err != nil {
			return Result{}, err
		}
		if err := resetsAlone(p.Old, "old_", p, figures); err != nil {
			return Result{}, fmt.Errorf("the old binary's resets: %w", err)
		}
		current, old, err := alternate(p.Rounds, func(isOld bool) (map[string]float64, error) {
			if isOld {
				return membersAlone(p.Old, p)
			}
			return membersAlone(binary, p)
		})
		if err != nil {
			return Result{}, fmt.Errorf("the Fleets side by side: %w", err)
		}
		addPrefixed(figures, "", current)
		addPrefixed(figures, "old_", old)
	}
	return Result{
		Scenario: "scenarios",
		Params: map[string]any{"objects": p.Objects, "members": p.Members, "copy_members": p.CopyMembers,
			"changes": p.Changes, "resets": p.Resets, "datastore": "sqlite"},
		Figures: figures,
		Notes: []string{
			"layered_*: a Fleet whose members have spec.template; copy_*: plain planes each given the template's objects by the API (today's way to start from a scenario).",
			"revisions_per_member: datastore revisions (one per record written) while members were made, divided by members; Fleet status writes included.",
			"layered_fleet_server_cpu_ms_per_member: user and system CPU of the server from the Fleet's create until every member is Ready, per member (the CPU profile, with --profile-dir, counts in it).",
			"layered_fleet_writes: updates of the Fleet (its status) the watch saw until every member was Ready.",
			"layered_fleet_simulation_change_*: the Fleet's spec.simulation set after its members are ready, until every member's Plane holds it (watched); revisions from the patch to the last member's, per member.",
			"marginal_heap_kib_per_member: the Go heap allocated 3 s after two forced garbage collections, before and after the members, divided by members (it includes what the server allocated in those 3 s); marginal_marked_heap_kib_per_member: the heap the last collection marked live (go_gc_heap_live_bytes), without that garbage.",
			"members_alone_* and old_members_alone_* (with --old-binary): the layered Fleet again, each binary on a server of its own holding the template and the Fleet only, the two taking turns over --rounds rounds; each figure the median of its rounds.",
			"reset_*: POST /reset after the member changed `changes` ConfigMaps; copy_reset_*: delete the plane, create it again and re-apply the template's objects; reset_alone_* and old_reset_alone_* (with --old-binary): the same resets on a server of their own that holds the template and that one member only.",
			"The template holds `objects` objects of ten kinds: namespace shop, a CRD and 100 of its custom resources, and ConfigMaps, Secrets, ServiceAccounts, Roles, RoleBindings, Services (without selector) and NetworkPolicies in shop.",
		},
	}, nil
}

// scenarioTemplate makes plane "scenario", the template, with objects
// objects.
func scenarioTemplate(ctx context.Context, s *server, root dynamic.Interface, objects int) error {
	if err := createBenchPlane(ctx, s, root, "scenario", ""); err != nil {
		return err
	}
	if err := fillScenario(ctx, s, "scenario", objects); err != nil {
		return fmt.Errorf("filling the template: %w", err)
	}
	return nil
}

// createBenchPlane creates a Plane (from template when set) and waits
// until its readyz answers.
func createBenchPlane(ctx context.Context, s *server, root dynamic.Interface, name, template string) error {
	spec := map[string]any{}
	if template != "" {
		spec["template"] = template
	}
	p := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "kplane.dev/v1", "kind": "Plane",
		"metadata": map[string]any{"name": name}, "spec": spec}}
	// A plane of the same name deleted a moment ago is released a moment
	// after its Plane is gone (409 until then).
	if err := waitFor(ctx, func() (bool, error) {
		_, err := root.Resource(planesGVR).Create(ctx, p, metav1.CreateOptions{})
		if apierrors.IsConflict(err) {
			return false, nil
		}
		return err == nil, err
	}); err != nil {
		return err
	}
	c, err := s.client(name)
	if err != nil {
		return err
	}
	return waitFor(ctx, func() (bool, error) {
		_, err := c.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		return err == nil, nil
	})
}

// The template's custom resources: 100, or a fifth of a smaller
// template.
const scenarioCustomResources = 100

var gizmosGVR = schema.GroupVersionResource{Group: "scenario.example.com", Version: "v1", Resource: "gizmos"}

// fillScenario writes objects objects into plane: namespace shop, a CRD
// and its custom resources, and ConfigMaps, Secrets, ServiceAccounts,
// Roles, RoleBindings, Services (without selector: no endpoints to keep)
// and NetworkPolicies in shop; ten kinds.
func fillScenario(ctx context.Context, s *server, plane string, objects int) error {
	c, err := s.client(plane)
	if err != nil {
		return err
	}
	if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	crs := min(scenarioCustomResources, objects/5)
	if err := scenarioCustomResourcesIn(ctx, s, plane, crs); err != nil {
		return err
	}
	for i := 0; i < objects-crs-2; i++ {
		if err := createScenarioObject(ctx, c, i); err != nil {
			return err
		}
	}
	return nil
}

// createScenarioObject creates the i-th built-in object of the template;
// membersAlone measures the Fleet of template members on a server of its
// own that holds the template and the Fleet only, as layeredMembers does.
func membersAlone(binary string, p scenariosParams) (map[string]float64, error) {
	s, err := startServer(binary)
	if err != nil {
		return nil, err
	}
	defer s.stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	root, err := dynamic.NewForConfig(s.config("root"))
	if err != nil {
		return nil, err
	}
	if err := scenarioTemplate(ctx, s, root, p.Objects); err != nil {
		return nil, err
	}
	layered := map[string]float64{}
	p.ProfileDir = ""
	if err := layeredMembers(ctx, s, root, p, layered); err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for name, value := range layered {
		out["members_alone_"+strings.TrimPrefix(name, "layered_")] = value
	}
	return out, nil
}

// changeConfigMaps knows which are ConfigMaps.
func createScenarioObject(ctx context.Context, c kubernetes.Interface, i int) error {
	meta := metav1.ObjectMeta{Name: fmt.Sprintf("o-%d", i), Namespace: "shop", Labels: map[string]string{"i": strconv.Itoa(i % 7)}}
	var err error
	switch i % 8 {
	case 0, 1:
		_, err = c.CoreV1().ConfigMaps("shop").Create(ctx, &corev1.ConfigMap{ObjectMeta: meta, Data: map[string]string{"v": fmt.Sprintf("%0200d", i)}}, metav1.CreateOptions{})
	case 2:
		_, err = c.CoreV1().Secrets("shop").Create(ctx, &corev1.Secret{ObjectMeta: meta, StringData: map[string]string{"k": fmt.Sprintf("%0100d", i)}}, metav1.CreateOptions{})
	case 3:
		_, err = c.CoreV1().ServiceAccounts("shop").Create(ctx, &corev1.ServiceAccount{ObjectMeta: meta}, metav1.CreateOptions{})
	case 4:
		_, err = c.RbacV1().Roles("shop").Create(ctx, &rbacv1.Role{ObjectMeta: meta,
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get"}}}}, metav1.CreateOptions{})
	case 5:
		_, err = c.RbacV1().RoleBindings("shop").Create(ctx, &rbacv1.RoleBinding{ObjectMeta: meta,
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: fmt.Sprintf("o-%d", i-1)},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: fmt.Sprintf("o-%d", i-2), Namespace: "shop"}}}, metav1.CreateOptions{})
	case 6:
		_, err = c.CoreV1().Services("shop").Create(ctx, &corev1.Service{ObjectMeta: meta,
			Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}}}, metav1.CreateOptions{})
	default:
		_, err = c.NetworkingV1().NetworkPolicies("shop").Create(ctx, &networkingv1.NetworkPolicy{ObjectMeta: meta,
			Spec: networkingv1.NetworkPolicySpec{PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}}}, metav1.CreateOptions{})
	}
	return err
}

// scenarioCustomResourcesIn creates the gizmos CRD in plane, waits until
// it is established and creates n gizmos in shop.
func scenarioCustomResourcesIn(ctx context.Context, s *server, plane string, n int) error {
	crds, err := apiextensionsclient.NewForConfig(s.config(plane))
	if err != nil {
		return err
	}
	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "gizmos.scenario.example.com"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: gizmosGVR.Group, Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "gizmos", Singular: "gizmo", Kind: "Gizmo", ListKind: "GizmoList"},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{
						"spec": {Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{
							"size": {Type: "integer"}, "color": {Type: "string"}}}}}}}},
		},
	}
	if _, err := crds.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, crd, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating the gizmos CRD: %w", err)
	}
	if err := waitEstablished(ctx, crds, crd.Name); err != nil {
		return err
	}
	gizmos, err := dynamic.NewForConfig(s.config(plane))
	if err != nil {
		return err
	}
	for i := range n {
		gizmo := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "scenario.example.com/v1", "kind": "Gizmo",
			"metadata": map[string]any{"name": fmt.Sprintf("g-%d", i)},
			"spec":     map[string]any{"size": int64(i), "color": fmt.Sprintf("%050d", i)}}}
		err := waitFor(ctx, func() (bool, error) {
			_, err := gizmos.Resource(gizmosGVR).Namespace("shop").Create(ctx, gizmo, metav1.CreateOptions{})
			// The plane's discovery may lag the Established condition by
			// a moment: the first create is retried on 404.
			if apierrors.IsNotFound(err) && i == 0 {
				return false, nil
			}
			return err == nil, err
		})
		if err != nil {
			return fmt.Errorf("creating gizmo %d: %w", i, err)
		}
	}
	return nil
}

// revision is the datastore's newest revision, as a list of Planes in
// root reports it.
func revision(ctx context.Context, root dynamic.Interface) (float64, error) {
	list, err := root.Resource(planesGVR).List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		return 0, err
	}
	return strconv.ParseFloat(list.GetResourceVersion(), 64)
}

func layeredMembers(ctx context.Context, s *server, root dynamic.Interface, p scenariosParams, figures map[string]float64) error {
	m0, err := measure(s)
	if err != nil {
		return err
	}
	r0, err := revision(ctx, root)
	if err != nil {
		return err
	}
	fleet := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "kplane.dev/v1", "kind": "Fleet",
		"metadata": map[string]any{"name": "episodes"},
		"spec":     map[string]any{"replicas": int64(p.Members), "template": "scenario", "namePrefix": "ep-"}}}
	var cpuProfile chan error
	if p.ProfileDir != "" {
		cpuProfile = make(chan error, 1)
		go func() {
			cpuProfile <- s.cpuProfile(filepath.Join(p.ProfileDir, "scenarios-fleet-cpu.pprof"), 3*time.Second)
		}()
	}
	cpuBefore, err := s.cpuSeconds()
	if err != nil {
		return err
	}
	began := time.Now()
	created, err := root.Resource(fleetsGVR).Create(ctx, fleet, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	// Watched, not polled: GETs of the Fleet every few milliseconds took
	// 15 % of the server's CPU from the members being made.
	progress, err := awaitFleetReady(ctx, root.Resource(fleetsGVR), created, p.Members, began)
	if err != nil {
		return fmt.Errorf("fleet of template members: %w", err)
	}
	figures["layered_fleet_ready_seconds"] = time.Since(began).Seconds()
	cpuAfter, err := s.cpuSeconds()
	if err != nil {
		return err
	}
	figures["layered_fleet_server_cpu_ms_per_member"] = (cpuAfter - cpuBefore) * 1000 / float64(p.Members)
	figures["layered_fleet_writes"] = float64(progress.writes)
	if cpuProfile != nil {
		if err := <-cpuProfile; err != nil {
			return err
		}
	}
	r1, err := revision(ctx, root)
	if err != nil {
		return err
	}
	figures["layered_revisions_per_member"] = (r1 - r0) / float64(p.Members)
	m1, err := measure(s)
	if err != nil {
		return err
	}
	if p.ProfileDir != "" {
		// What the members left live, read where the figures are.
		if err := s.heapProfile(filepath.Join(p.ProfileDir, "scenarios-members-heap.pprof")); err != nil {
			return err
		}
	}
	figures["layered_marginal_rss_kib_per_member"] = (m1.rss - m0.rss) / 1024 / float64(p.Members)
	figures["layered_marginal_heap_kib_per_member"] = (m1.liveHeap - m0.liveHeap) / 1024 / float64(p.Members)
	figures["layered_marginal_marked_heap_kib_per_member"] = (m1.markedHeap - m0.markedHeap) / 1024 / float64(p.Members)
	fmt.Printf("   scenarios: %d template members ready in %.2fs, %.1f revisions and %.0f KiB RSS each\n", p.Members,
		figures["layered_fleet_ready_seconds"], figures["layered_revisions_per_member"], figures["layered_marginal_rss_kib_per_member"])
	return nil
}

// fleetSimulationChange gives the members of Fleet "episodes" a
// simulation through the Fleet and times until every member's Plane holds
// it, watching the Planes.
func fleetSimulationChange(ctx context.Context, root dynamic.Interface, members int, figures map[string]float64) error {
	planes := root.Resource(planesGVR)
	selector := "kplane.dev/fleet=episodes"
	list, err := planes.List(ctx, metav1.ListOptions{LabelSelector: selector, Limit: 1})
	if err != nil {
		return err
	}
	r0, err := strconv.ParseFloat(list.GetResourceVersion(), 64)
	if err != nil {
		return err
	}
	began := time.Now()
	if _, err := root.Resource(fleetsGVR).Patch(ctx, "episodes", types.MergePatchType,
		[]byte(`{"spec":{"simulation":{"readyDelay":"1s"}}}`), metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("giving the Fleet a simulation: %w", err)
	}
	given := map[string]bool{}
	rv := list.GetResourceVersion()
	var last float64
	for len(given) < members {
		w, err := planes.Watch(ctx, metav1.ListOptions{LabelSelector: selector, ResourceVersion: rv})
		if err != nil {
			return err
		}
		for ev := range w.ResultChan() {
			if ev.Type == watch.Error {
				w.Stop()
				return apierrors.FromObject(ev.Object)
			}
			u := ev.Object.(*unstructured.Unstructured)
			rv = u.GetResourceVersion()
			if d, _, _ := unstructured.NestedString(u.Object, "spec", "simulation", "readyDelay"); d == "1s" {
				given[u.GetName()] = true
				last, _ = strconv.ParseFloat(rv, 64)
			}
			if len(given) == members {
				break
			}
		}
		w.Stop()
	}
	figures["layered_fleet_simulation_change_seconds"] = time.Since(began).Seconds()
	figures["layered_fleet_simulation_change_revisions_per_member"] = (last - r0) / float64(members)
	fmt.Printf("   scenarios: a Fleet simulation given to %d members in %.2fs\n", members, figures["layered_fleet_simulation_change_seconds"])
	return nil
}

func copiedMembers(ctx context.Context, s *server, root dynamic.Interface, p scenariosParams, figures map[string]float64) error {
	m0, err := measure(s)
	if err != nil {
		return err
	}
	r0, err := revision(ctx, root)
	if err != nil {
		return err
	}
	began := time.Now()
	for i := range p.CopyMembers {
		if err := copyPlane(ctx, s, root, fmt.Sprintf("copy-%d", i), p.Objects); err != nil {
			return err
		}
	}
	took := time.Since(began)
	figures["copy_seconds_per_member"] = took.Seconds() / float64(p.CopyMembers)
	r1, err := revision(ctx, root)
	if err != nil {
		return err
	}
	figures["copy_revisions_per_member"] = (r1 - r0) / float64(p.CopyMembers)
	m1, err := measure(s)
	if err != nil {
		return err
	}
	figures["copy_marginal_rss_kib_per_member"] = (m1.rss - m0.rss) / 1024 / float64(p.CopyMembers)
	figures["copy_marginal_heap_kib_per_member"] = (m1.liveHeap - m0.liveHeap) / 1024 / float64(p.CopyMembers)
	fmt.Printf("   scenarios: %d copied planes, %.2fs, %.0f revisions and %.0f KiB RSS each\n", p.CopyMembers,
		figures["copy_seconds_per_member"], figures["copy_revisions_per_member"], figures["copy_marginal_rss_kib_per_member"])
	return nil
}

// copyPlane makes a plain plane and applies the template's objects to it.
func copyPlane(ctx context.Context, s *server, root dynamic.Interface, name string, objects int) error {
	if err := createBenchPlane(ctx, s, root, name, ""); err != nil {
		return err
	}
	return fillScenario(ctx, s, name, objects)
}

func resets(ctx context.Context, s *server, root dynamic.Interface, p scenariosParams, figures map[string]float64) error {
	c, err := s.client("ep-0000")
	if err != nil {
		return err
	}
	layered, err := memberResets(ctx, s, c, "ep-0000", p)
	if err != nil {
		return err
	}
	var copied []time.Duration
	for round := range min(p.Resets, 5) {
		began := time.Now()
		name := "copy-0"
		if err := root.Resource(planesGVR).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			return err
		}
		if err := waitFor(ctx, func() (bool, error) {
			_, err := root.Resource(planesGVR).Get(ctx, name, metav1.GetOptions{})
			return err != nil, nil
		}); err != nil {
			return err
		}
		if err := copyPlane(ctx, s, root, name, p.Objects); err != nil {
			return fmt.Errorf("copy reset %d: %w", round, err)
		}
		copied = append(copied, time.Since(began))
	}
	for name, d := range map[string][]time.Duration{"reset": layered, "copy_reset": copied} {
		sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
		figures[name+"_p50_ms"] = ms(percentile(d, 0.5))
		figures[name+"_p99_ms"] = ms(percentile(d, 0.99))
	}
	fmt.Printf("   scenarios: reset p50 %.0f ms p99 %.0f ms; delete + re-create + re-apply p50 %.0f ms\n",
		figures["reset_p50_ms"], figures["reset_p99_ms"], figures["copy_reset_p50_ms"])
	return nil
}

// memberResets resets plane, a member of the template, p.Resets times,
// each after p.Changes changes, and returns how long each reset took.
// The resets share one connection, as an episode loop's client does (the
// SDK, client-go): a TLS handshake per reset is not the reset's.
func memberResets(ctx context.Context, s *server, c kubernetes.Interface, plane string, p scenariosParams) ([]time.Duration, error) {
	client := s.http()
	defer client.CloseIdleConnections()
	var took []time.Duration
	for round := range p.Resets {
		if err := changeConfigMaps(ctx, c, p.Changes, round); err != nil {
			return nil, err
		}
		began := time.Now()
		if err := postPlaneReset(ctx, s, client, plane); err != nil {
			return nil, err
		}
		took = append(took, time.Since(began))
	}
	return took, nil
}

// resetsAlone measures the resets of memberResets on a server of its own
// holding only the template and one member, and writes them as
// <prefix>reset_alone_*.
func resetsAlone(binary, prefix string, p scenariosParams, figures map[string]float64) error {
	s, err := startServer(binary)
	if err != nil {
		return err
	}
	defer s.stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	root, err := dynamic.NewForConfig(s.config("root"))
	if err != nil {
		return err
	}
	if err := scenarioTemplate(ctx, s, root, p.Objects); err != nil {
		return err
	}
	if err := createBenchPlane(ctx, s, root, "ep-0000", "scenario"); err != nil {
		return err
	}
	c, err := s.client("ep-0000")
	if err != nil {
		return err
	}
	took, err := memberResets(ctx, s, c, "ep-0000", p)
	if err != nil {
		return err
	}
	sort.Slice(took, func(i, j int) bool { return took[i] < took[j] })
	figures[prefix+"reset_alone_p50_ms"] = ms(percentile(took, 0.5))
	figures[prefix+"reset_alone_p99_ms"] = ms(percentile(took, 0.99))
	fmt.Printf("   scenarios: %sreset of the one member of a server p50 %.0f ms p99 %.0f ms\n", prefix,
		figures[prefix+"reset_alone_p50_ms"], figures[prefix+"reset_alone_p99_ms"])
	return nil
}

func changeConfigMaps(ctx context.Context, c kubernetes.Interface, n, round int) error {
	for i := range n {
		// o-0, o-1, o-8, o-9, ... are ConfigMaps (createScenarioObject).
		name := fmt.Sprintf("o-%d", 8*(i/2)+i%2)
		patch := fmt.Appendf(nil, `{"data":{"round":"%d"}}`, round)
		if _, err := c.CoreV1().ConfigMaps("shop").Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			return err
		}
	}
	return nil
}

func postPlaneReset(ctx context.Context, s *server, client *http.Client, plane string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url+"/clusters/"+plane+"/control-plane/reset", nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+s.token)
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	// Read to the end: the connection is then reused.
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("reset %s: %s", plane, resp.Status)
	}
	return nil
}
