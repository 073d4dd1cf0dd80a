package e2e

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/utils/ptr"

	"kplane.dev/kplane/test/e2e/framework"
)

// hookServer is an admission webhook server of the test process on
// localhost, as an operator under development (or envtest) runs one. Its
// path names the configuration that calls it: /validate/<tag> refuses
// objects labelled deny=true, /mutate/<tag> labels objects mutated-by=<tag>.
// It records the name of every object it is asked about, by path.
type hookServer struct {
	url      string
	port     int
	caBundle []byte

	mu    sync.Mutex
	calls map[string][]string
	// release ends the calls of /slow/<tag>, which wait for it.
	release chan struct{}
	slow    atomic.Int32
}

// hookServiceName is the Service name the server's certificate holds
// (clientConfig.service is called with this server name).
const hookServiceName = "hook.webhooks.svc"

func startHookServer(t *testing.T) *hookServer {
	t.Helper()
	return startHookServerOn(t, "127.0.0.1")
}

// startHookServerOn starts a hookServer listening on ip.
func startHookServerOn(t *testing.T, ip string) *hookServer {
	t.Helper()
	certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKey(ip,
		[]net.IP{net.ParseIP(ip)}, []string{"localhost", hookServiceName})
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	h := &hookServer{caBundle: certPEM, calls: map[string][]string{}, release: make(chan struct{})}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(h.serve))
	l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatal(err)
	}
	srv.Listener.Close()
	srv.Listener = l
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	h.url = srv.URL
	h.port = srv.Listener.Addr().(*net.TCPAddr).Port
	return h
}

func (h *hookServer) serve(w http.ResponseWriter, r *http.Request) {
	if strings.HasPrefix(r.URL.Path, "/convert/") {
		h.convert(w, r)
		return
	}
	var review admissionv1.AdmissionReview
	if err := json.NewDecoder(r.Body).Decode(&review); err != nil || review.Request == nil {
		http.Error(w, fmt.Sprintf("bad review: %v", err), http.StatusBadRequest)
		return
	}
	req := review.Request
	h.mu.Lock()
	h.calls[r.URL.Path] = append(h.calls[r.URL.Path], req.Name)
	h.mu.Unlock()

	if strings.HasPrefix(r.URL.Path, "/slow/") {
		h.slow.Add(1)
		<-h.release
	}
	var obj metav1.PartialObjectMetadata
	_ = json.Unmarshal(req.Object.Raw, &obj)
	tag := r.URL.Path[strings.LastIndex(r.URL.Path, "/")+1:]
	resp := &admissionv1.AdmissionResponse{UID: req.UID, Allowed: true, Warnings: []string{"seen by " + tag}}
	switch {
	case strings.HasPrefix(r.URL.Path, "/validate/") && obj.Labels["deny"] == "true":
		resp.Allowed = false
		resp.Result = &metav1.Status{Code: http.StatusForbidden, Message: "denied by the webhook of " + tag}
	case strings.HasPrefix(r.URL.Path, "/mutate/"):
		patch := fmt.Sprintf(`[{"op":"add","path":"/metadata/labels/mutated-by","value":%q}]`, tag)
		if obj.Labels == nil {
			patch = fmt.Sprintf(`[{"op":"add","path":"/metadata/labels","value":{"mutated-by":%q}}]`, tag)
		}
		resp.Patch = []byte(patch)
		resp.PatchType = ptr.To(admissionv1.PatchTypeJSONPatch)
	}
	review.Response = resp
	review.Request = nil
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(&review)
}

// convert answers a ConversionReview: spec.color of v1 is spec.colour of
// v2.
func (h *hookServer) convert(w http.ResponseWriter, r *http.Request) {
	var review apiextensionsv1.ConversionReview
	if err := json.NewDecoder(r.Body).Decode(&review); err != nil || review.Request == nil {
		http.Error(w, fmt.Sprintf("bad review: %v", err), http.StatusBadRequest)
		return
	}
	req := review.Request
	resp := &apiextensionsv1.ConversionResponse{UID: req.UID, Result: metav1.Status{Status: metav1.StatusSuccess}}
	for _, raw := range req.Objects {
		var obj map[string]any
		if err := json.Unmarshal(raw.Raw, &obj); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		h.mu.Lock()
		h.calls[r.URL.Path] = append(h.calls[r.URL.Path], obj["metadata"].(map[string]any)["name"].(string))
		h.mu.Unlock()
		spec, _ := obj["spec"].(map[string]any)
		from, to := "color", "colour"
		if req.DesiredAPIVersion == "conv.example.org/v1" {
			from, to = "colour", "color"
		}
		if v, ok := spec[from]; ok {
			delete(spec, from)
			spec[to] = v
		}
		obj["apiVersion"] = req.DesiredAPIVersion
		out, _ := json.Marshal(obj)
		resp.ConvertedObjects = append(resp.ConvertedObjects, runtime.RawExtension{Raw: out})
	}
	review.Response, review.Request = resp, nil
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(&review)
}

// callsTo returns the names of the objects the server was asked about on
// path.
func (h *hookServer) callsTo(path string) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.calls[path]...)
}

// deadURL is an HTTPS URL on localhost where nothing listens.
func deadURL(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return "https://" + addr + "/dead"
}

func configMapRule() []admissionregistrationv1.RuleWithOperations {
	return []admissionregistrationv1.RuleWithOperations{{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
		Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}},
	}}
}

func validatingHook(name string, client admissionregistrationv1.WebhookClientConfig) *admissionregistrationv1.ValidatingWebhookConfiguration {
	return &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name: "check.kplane.dev", ClientConfig: client, Rules: configMapRule(),
			FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1"},
		}},
	}
}

func mutatingHook(name string, client admissionregistrationv1.WebhookClientConfig, namespaces *metav1.LabelSelector) *admissionregistrationv1.MutatingWebhookConfiguration {
	return &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name: "label.kplane.dev", ClientConfig: client, Rules: configMapRule(),
			NamespaceSelector:       namespaces,
			FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1"},
		}},
	}
}

func labelledConfigMap(name string, labels map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
}

// expectOnly fails unless every name starts with prefix.
func expectOnly(t *testing.T, what string, names []string, prefix string) {
	t.Helper()
	for _, n := range names {
		if !strings.HasPrefix(n, prefix) {
			t.Errorf("%s was asked about %q, an object of another plane (calls: %v)", what, n, names)
		}
	}
}

// TestValidatingWebhookPerPlane: a validating webhook refuses in its own
// plane only; same-named configurations in two planes each call their own
// webhook for their own plane's requests; failurePolicy Fail to a dead URL
// refuses; a plane without configurations is not affected; deleting a
// plane stops its webhooks.
func TestValidatingWebhookPerPlane(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	hook := startHookServer(t)
	a, b, free := uniquePlane(t, "vwh-a"), uniquePlane(t, "vwh-b"), uniquePlane(t, "vwh-free")
	ca, cb, cfree := shared.Client(t, a), shared.Client(t, b), shared.Client(t, free)
	for _, c := range []kubernetes.Interface{ca, cb, cfree} {
		quotaNamespace(t, c, "work")
	}
	for plane, c := range map[string]kubernetes.Interface{a: ca, b: cb} {
		cfg := validatingHook("policy", admissionregistrationv1.WebhookClientConfig{
			URL: ptr.To(hook.url + "/validate/" + plane), CABundle: hook.caBundle})
		if _, err := c.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, cfg, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	deny := map[string]string{"deny": "true"}
	for plane, c := range map[string]kubernetes.Interface{a: ca, b: cb} {
		framework.Eventually(t, framework.DefaultTimeout, "plane "+plane+"'s webhook refuses", func(ctx context.Context) error {
			_, err := c.CoreV1().ConfigMaps("work").Create(ctx, labelledConfigMap(plane+"-denied", deny), metav1.CreateOptions{})
			if err == nil {
				_ = c.CoreV1().ConfigMaps("work").Delete(ctx, plane+"-denied", metav1.DeleteOptions{})
				return fmt.Errorf("admitted")
			}
			if want := "denied by the webhook of " + plane; !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), want) {
				return fmt.Errorf("got %v, want 403 with %q", err, want)
			}
			return nil
		})
	}
	// Allowed objects pass and carry the webhook's warning.
	if _, err := ca.CoreV1().ConfigMaps("work").Create(ctx, labelledConfigMap(a+"-ok", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// A plane without configurations admits what the others refuse, and
	// its requests reach no webhook.
	if _, err := cfree.CoreV1().ConfigMaps("work").Create(ctx, labelledConfigMap(free+"-denied", deny), metav1.CreateOptions{}); err != nil {
		t.Fatalf("plane %s without webhooks: %v", free, err)
	}
	expectOnly(t, "plane "+a+"'s webhook", hook.callsTo("/validate/"+a), a+"-")
	expectOnly(t, "plane "+b+"'s webhook", hook.callsTo("/validate/"+b), b+"-")
	if calls := hook.callsTo("/validate/" + free); len(calls) != 0 {
		t.Fatalf("a webhook was called for plane %s: %v", free, calls)
	}

	// failurePolicy Fail with nothing listening refuses, in that plane only.
	dead := validatingHook("dead", admissionregistrationv1.WebhookClientConfig{URL: ptr.To(deadURL(t)), CABundle: hook.caBundle})
	if _, err := cb.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, dead, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, framework.DefaultTimeout, "the dead webhook refuses in "+b, func(ctx context.Context) error {
		_, err := cb.CoreV1().ConfigMaps("work").Create(ctx, labelledConfigMap(b+"-dead", nil), metav1.CreateOptions{})
		if err == nil {
			_ = cb.CoreV1().ConfigMaps("work").Delete(ctx, b+"-dead", metav1.DeleteOptions{})
			return fmt.Errorf("admitted")
		}
		if !strings.Contains(err.Error(), `failed calling webhook "check.kplane.dev"`) {
			return fmt.Errorf("got %v, want a failed call of the webhook", err)
		}
		return nil
	})
	if _, err := ca.CoreV1().ConfigMaps("work").Create(ctx, labelledConfigMap(a+"-after-dead", nil), metav1.CreateOptions{}); err != nil {
		t.Fatalf("plane %s after plane %s's dead webhook: %v", a, b, err)
	}

	// Deleting plane A stops its webhooks: the plane made again under the
	// same name has none, and A's webhook is not called any more.
	if out, err := kplaneCmd(t, shared, "planes", "delete", a); err != nil {
		t.Fatalf("kplane planes delete: %v\n%s", err, out)
	}
	before := len(hook.callsTo("/validate/" + a))
	again := shared.Client(t, a)
	quotaNamespace(t, again, "work")
	if _, err := again.CoreV1().ConfigMaps("work").Create(ctx, labelledConfigMap(a+"-denied", deny), metav1.CreateOptions{}); err != nil {
		t.Fatalf("plane %s made again after its deletion: %v", a, err)
	}
	if after := len(hook.callsTo("/validate/" + a)); after != before {
		t.Fatalf("the deleted plane's webhook was called %d more times", after-before)
	}
	// B's webhooks still act.
	if _, err := cb.CoreV1().ConfigMaps("work").Create(ctx, labelledConfigMap(b+"-denied-2", deny), metav1.CreateOptions{}); err == nil {
		t.Fatalf("plane %s's webhooks stopped with plane %s's deletion", b, a)
	}
}

// TestMutatingWebhookPerPlane: a mutating webhook patches objects of its
// plane, its namespaceSelector is matched against the namespaces of that
// plane, and same-named configurations in two planes each patch in their
// own plane only.
func TestMutatingWebhookPerPlane(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	hook := startHookServer(t)
	a, b := uniquePlane(t, "mwh-a"), uniquePlane(t, "mwh-b")
	ca, cb := shared.Client(t, a), shared.Client(t, b)
	// "on" is labelled hooks=on in plane A only.
	for plane, c := range map[string]kubernetes.Interface{a: ca, b: cb} {
		labels := map[string]string{}
		if plane == a {
			labels["hooks"] = "on"
		}
		if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "on", Labels: labels}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "plain"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		cfg := mutatingHook("labeller", admissionregistrationv1.WebhookClientConfig{
			URL: ptr.To(hook.url + "/mutate/" + plane), CABundle: hook.caBundle},
			&metav1.LabelSelector{MatchLabels: map[string]string{"hooks": "on"}})
		// The test's objects only: the plane's controllers write
		// ConfigMaps (kube-root-ca.crt) in these namespaces too.
		cfg.Webhooks[0].ObjectSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "x"}}
		if _, err := c.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, cfg, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	seq := 0
	framework.Eventually(t, framework.DefaultTimeout, "plane "+a+"'s webhook labels ConfigMaps", func(ctx context.Context) error {
		seq++
		cm, err := ca.CoreV1().ConfigMaps("on").Create(ctx, labelledConfigMap(fmt.Sprintf("%s-%d", a, seq), map[string]string{"app": "x"}), metav1.CreateOptions{})
		if err != nil {
			return err
		}
		if got := cm.Labels["mutated-by"]; got != a {
			return fmt.Errorf("labels %v", cm.Labels)
		}
		return nil
	})
	// Outside the selected namespace, and in plane B whose "on" lacks the
	// label, nothing is patched and B's webhook is never called.
	for _, tc := range []struct {
		c         kubernetes.Interface
		plane, ns string
	}{{ca, a, "plain"}, {cb, b, "on"}, {cb, b, "plain"}} {
		cm, err := tc.c.CoreV1().ConfigMaps(tc.ns).Create(ctx, labelledConfigMap(tc.plane+"-unselected", map[string]string{"app": "x"}), metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("plane %s, namespace %s: %v", tc.plane, tc.ns, err)
		}
		if _, ok := cm.Labels["mutated-by"]; ok {
			t.Errorf("plane %s, namespace %s: patched %v", tc.plane, tc.ns, cm.Labels)
		}
	}
	expectOnly(t, "plane "+a+"'s webhook", hook.callsTo("/mutate/"+a), a+"-")
	if calls := hook.callsTo("/mutate/" + b); len(calls) != 0 {
		t.Fatalf("plane %s's webhook was called: %v", b, calls)
	}
	// Labelling B's namespace selects it, in B only.
	ns, err := cb.CoreV1().Namespaces().Get(ctx, "on", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ns.Labels = map[string]string{"hooks": "on"}
	if _, err := cb.CoreV1().Namespaces().Update(ctx, ns, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, framework.DefaultTimeout, "plane "+b+"'s webhook labels ConfigMaps", func(ctx context.Context) error {
		seq++
		cm, err := cb.CoreV1().ConfigMaps("on").Create(ctx, labelledConfigMap(fmt.Sprintf("%s-%d", b, seq), map[string]string{"app": "x"}), metav1.CreateOptions{})
		if err != nil {
			return err
		}
		if got := cm.Labels["mutated-by"]; got != b {
			return fmt.Errorf("labels %v", cm.Labels)
		}
		return nil
	})
	expectOnly(t, "plane "+b+"'s webhook", hook.callsTo("/mutate/"+b), b+"-")
	expectOnly(t, "plane "+a+"'s webhook", hook.callsTo("/mutate/"+a), a+"-")
}

// hostAddress returns an IPv4 address of a network interface of the host
// other than loopback (which EndpointSlices may not name).
func hostAddress(t *testing.T) string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if ipnet, ok := a.(*net.IPNet); ok && ipnet.IP.To4() != nil && !ipnet.IP.IsLoopback() && !ipnet.IP.IsLinkLocalUnicast() {
			return ipnet.IP.String()
		}
	}
	t.Skip("the host has no network interface but loopback: an EndpointSlice cannot name it")
	return ""
}

// TestWebhookServiceOnHost: clientConfig.service is resolved through the
// plane's own Service and EndpointSlices, so a webhook server on the host
// registers itself with a selector-less Service and an EndpointSlice
// naming the host's address.
func TestWebhookServiceOnHost(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ip := hostAddress(t)
	hook := startHookServerOn(t, ip)
	plane, other := uniquePlane(t, "svcwh"), uniquePlane(t, "svcwh-other")
	c, cother := shared.Client(t, plane), shared.Client(t, other)
	quotaNamespace(t, c, "webhooks")
	quotaNamespace(t, cother, "webhooks")
	registerHookService(t, c, ip, hook.port)
	cfg := validatingHook("by-service", admissionregistrationv1.WebhookClientConfig{
		Service:  &admissionregistrationv1.ServiceReference{Namespace: "webhooks", Name: "hook", Path: ptr.To("/validate/" + plane), Port: ptr.To[int32](443)},
		CABundle: hook.caBundle})
	for _, cl := range []kubernetes.Interface{c, cother} {
		if _, err := cl.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, cfg, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	framework.Eventually(t, framework.DefaultTimeout, "the webhook behind the Service refuses", func(ctx context.Context) error {
		_, err := c.CoreV1().ConfigMaps("webhooks").Create(ctx, labelledConfigMap(plane+"-denied", map[string]string{"deny": "true"}), metav1.CreateOptions{})
		if err == nil {
			_ = c.CoreV1().ConfigMaps("webhooks").Delete(ctx, plane+"-denied", metav1.DeleteOptions{})
			return fmt.Errorf("admitted")
		}
		if want := "denied by the webhook of " + plane; !strings.Contains(err.Error(), want) {
			return fmt.Errorf("got %v, want %q", err, want)
		}
		return nil
	})
	// The other plane has the same configuration but no such Service: its
	// Service reference resolves in its own plane, to nothing.
	framework.Eventually(t, framework.DefaultTimeout, "plane "+other+"'s Service reference fails", func(ctx context.Context) error {
		_, err := cother.CoreV1().ConfigMaps("webhooks").Create(ctx, labelledConfigMap(other+"-x", nil), metav1.CreateOptions{})
		if err == nil {
			_ = cother.CoreV1().ConfigMaps("webhooks").Delete(ctx, other+"-x", metav1.DeleteOptions{})
			return fmt.Errorf("admitted")
		}
		if !strings.Contains(err.Error(), `failed calling webhook`) {
			return fmt.Errorf("got %v, want a failed call", err)
		}
		return nil
	})
	if calls := hook.callsTo("/validate/" + other); len(calls) != 0 {
		t.Fatalf("plane %s's configuration reached plane %s's Service: %v", other, plane, calls)
	}
}

// registerHookService registers the hook server on the host as Service
// webhooks/hook, the recipe of README: a selector-less Service and an
// EndpointSlice with the host's address.
func registerHookService(t *testing.T, c kubernetes.Interface, ip string, port int) {
	t.Helper()
	ctx := context.Background()
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "hook", Namespace: "webhooks"},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "https", Port: 443}}},
	}
	if _, err := c.CoreV1().Services("webhooks").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "hook-host", Namespace: "webhooks",
			Labels: map[string]string{discoveryv1.LabelServiceName: "hook"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{ip}}},
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("https"), Port: ptr.To(int32(port))}},
	}
	if _, err := c.DiscoveryV1().EndpointSlices("webhooks").Create(ctx, slice, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestWebhookBadInput: configurations the API refuses answer 422 with the
// field at fault, as upstream.
func TestWebhookBadInput(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := shared.Client(t, uniquePlane(t, "whbad"))
	for _, tc := range []struct {
		what  string
		cfg   *admissionregistrationv1.ValidatingWebhookConfiguration
		field string
	}{
		{"http URL", validatingHook("bad-url", admissionregistrationv1.WebhookClientConfig{URL: ptr.To("http://127.0.0.1:9443/x")}), "webhooks[0].clientConfig.url"},
		{"URL with a fragment", validatingHook("bad-fragment", admissionregistrationv1.WebhookClientConfig{URL: ptr.To("https://127.0.0.1:9443/x#y")}), "webhooks[0].clientConfig.url"},
		{"URL and service", validatingHook("bad-both", admissionregistrationv1.WebhookClientConfig{URL: ptr.To("https://127.0.0.1:9443/x"),
			Service: &admissionregistrationv1.ServiceReference{Namespace: "default", Name: "x"}}), "webhooks[0].clientConfig"},
	} {
		_, err := c.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, tc.cfg, metav1.CreateOptions{})
		if !apierrors.IsInvalid(err) {
			t.Errorf("%s: got %v, want 422", tc.what, err)
			continue
		}
		status := err.(apierrors.APIStatus).Status()
		found := false
		for _, cause := range status.Details.Causes {
			found = found || cause.Field == tc.field
		}
		if !found {
			t.Errorf("%s: causes %+v, want one on %s", tc.what, status.Details.Causes, tc.field)
		}
	}
	// A caBundle that holds no certificate is stored, as upstream (which
	// validates it for CRD conversion only), and every call fails with why.
	garbage := validatingHook("bad-ca", admissionregistrationv1.WebhookClientConfig{URL: ptr.To("https://127.0.0.1:9443/x"), CABundle: []byte("not a certificate")})
	if _, err := c.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, garbage, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "work"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, framework.DefaultTimeout, "calls with the bad caBundle fail", func(ctx context.Context) error {
		_, err := c.CoreV1().ConfigMaps("work").Create(ctx, labelledConfigMap("x", nil), metav1.CreateOptions{})
		if err == nil {
			_ = c.CoreV1().ConfigMaps("work").Delete(ctx, "x", metav1.DeleteOptions{})
			return fmt.Errorf("admitted")
		}
		if want := "failed calling webhook"; !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "certificate") {
			return fmt.Errorf("got %v, want %q naming the certificates", err, want)
		}
		return nil
	})
}

// TestWebhookEgressPolicy: a webhook at a link-local (cloud metadata)
// address is never called, and the refusal names the policy.
func TestWebhookEgressPolicy(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	plane := uniquePlane(t, "whegress")
	c := shared.Client(t, plane)
	quotaNamespace(t, c, "work")
	cfg := validatingHook("metadata", admissionregistrationv1.WebhookClientConfig{URL: ptr.To("https://169.254.169.254/latest/meta-data")})
	if _, err := c.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, cfg, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, framework.DefaultTimeout, "the metadata webhook is refused by the policy", func(ctx context.Context) error {
		_, err := c.CoreV1().ConfigMaps("work").Create(ctx, labelledConfigMap("x", nil), metav1.CreateOptions{})
		if err == nil {
			_ = c.CoreV1().ConfigMaps("work").Delete(ctx, "x", metav1.DeleteOptions{})
			return fmt.Errorf("admitted")
		}
		if want := "kplane webhook egress policy refuses 169.254.169.254:443: link-local"; !strings.Contains(err.Error(), want) {
			return fmt.Errorf("got %v, want %q", err, want)
		}
		return nil
	})
}

// TestWebhookEgressFlagsAndPlaneLimit: --webhook-egress-deny-cidrs refuses
// what it names, and --webhook-max-in-flight-per-plane keeps a plane whose
// webhook hangs from holding more than its share: its calls beyond the
// bound fail at once while another plane's webhooks are called as usual.
func TestWebhookEgressFlagsAndPlaneLimit(t *testing.T) {
	t.Parallel()
	ip := hostAddress(t)
	s := framework.StartServer(t, framework.Options{Args: []string{
		"--webhook-egress-deny-cidrs", "127.0.0.0/8", "--webhook-max-in-flight-per-plane", "2"}})
	ctx := context.Background()
	local, hook := startHookServer(t), startHookServerOn(t, ip)
	hookURL := "https://" + net.JoinHostPort(ip, fmt.Sprint(hook.port))

	denied, slow, other := "denied", "slow", "other"
	clients := map[string]kubernetes.Interface{}
	// In this order: once the cache holds the denied plane's configuration
	// (the first wait below), it holds the others too.
	for _, target := range []struct {
		plane, url string
		hook       *hookServer
	}{
		{slow, hookURL + "/slow/" + slow, hook}, {other, hookURL + "/validate/" + other, hook}, {denied, local.url + "/validate/" + denied, local},
	} {
		plane := target.plane
		c := s.Client(t, plane)
		clients[plane] = c
		quotaNamespace(t, c, "work")
		cfg := validatingHook("hook", admissionregistrationv1.WebhookClientConfig{URL: ptr.To(target.url), CABundle: target.hook.caBundle})
		if _, err := c.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, cfg, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	framework.Eventually(t, framework.DefaultTimeout, "the loopback webhook is refused by the deny flag", func(ctx context.Context) error {
		_, err := clients[denied].CoreV1().ConfigMaps("work").Create(ctx, labelledConfigMap("x", nil), metav1.CreateOptions{})
		if err == nil {
			_ = clients[denied].CoreV1().ConfigMaps("work").Delete(ctx, "x", metav1.DeleteOptions{})
			return fmt.Errorf("admitted")
		}
		if want := "denied by 127.0.0.0/8 (--webhook-egress-deny-cidrs)"; !strings.Contains(err.Error(), want) {
			return fmt.Errorf("got %v, want %q", err, want)
		}
		return nil
	})
	if calls := local.callsTo("/validate/" + denied); len(calls) != 0 {
		t.Fatalf("the denied webhook was called: %v", calls)
	}

	// Two creates in the slow plane hold its two slots.
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait)
	released := false
	release := func() {
		if !released {
			released = true
			close(hook.release)
		}
	}
	t.Cleanup(release)
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = clients[slow].CoreV1().ConfigMaps("work").Create(ctx, labelledConfigMap(fmt.Sprintf("held-%d", i), nil), metav1.CreateOptions{})
		}()
	}
	framework.Eventually(t, framework.DefaultTimeout, "two calls wait in the slow webhook", func(context.Context) error {
		if n := hook.slow.Load(); n != 2 {
			return fmt.Errorf("%d waiting", n)
		}
		return nil
	})
	_, err := clients[slow].CoreV1().ConfigMaps("work").Create(ctx, labelledConfigMap("third", nil), metav1.CreateOptions{})
	if want := "the plane has 2 webhook calls in flight, its limit (--webhook-max-in-flight-per-plane)"; err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("third create in the slow plane: got %v, want %q", err, want)
	}
	if n := hook.slow.Load(); n != 2 {
		t.Fatalf("the slow webhook got %d calls, want 2", n)
	}
	// The other plane's webhook is called while the slow one hangs.
	framework.Eventually(t, framework.DefaultTimeout, "the other plane's webhook answers", func(ctx context.Context) error {
		_, err := clients[other].CoreV1().ConfigMaps("work").Create(ctx, labelledConfigMap("other", nil), metav1.CreateOptions{})
		return err
	})
	if calls := hook.callsTo("/validate/" + other); len(calls) == 0 {
		t.Fatal("the other plane's webhook was not called")
	}
	release()
}

// TestWebhookUpstreamMatching: objectSelector, matchConditions (CEL),
// dry-run and warnings act as upstream in a plane.
func TestWebhookUpstreamMatching(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	hook := startHookServer(t)
	plane := uniquePlane(t, "whmatch")
	c := shared.Client(t, plane)
	quotaNamespace(t, c, "work")
	validating := validatingHook("checked-only", admissionregistrationv1.WebhookClientConfig{
		URL: ptr.To(hook.url + "/validate/" + plane), CABundle: hook.caBundle})
	validating.Webhooks[0].MatchConditions = []admissionregistrationv1.MatchCondition{
		{Name: "checked", Expression: `object.metadata.name.startsWith("checked-")`}}
	if _, err := c.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, validating, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	mutating := mutatingHook("app-only", admissionregistrationv1.WebhookClientConfig{
		URL: ptr.To(hook.url + "/mutate/" + plane), CABundle: hook.caBundle}, nil)
	mutating.Webhooks[0].ObjectSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "x"}}
	if _, err := c.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, mutating, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	deny := map[string]string{"deny": "true", "app": "x"}
	framework.Eventually(t, framework.DefaultTimeout, "the validating webhook acts", func(ctx context.Context) error {
		_, err := c.CoreV1().ConfigMaps("work").Create(ctx, labelledConfigMap("checked-denied", deny), metav1.CreateOptions{})
		if err == nil {
			_ = c.CoreV1().ConfigMaps("work").Delete(ctx, "checked-denied", metav1.DeleteOptions{})
			return fmt.Errorf("admitted")
		}
		return nil
	})
	seq := 0
	framework.Eventually(t, framework.DefaultTimeout, "the mutating webhook acts", func(ctx context.Context) error {
		seq++
		cm, err := c.CoreV1().ConfigMaps("work").Create(ctx, labelledConfigMap(fmt.Sprintf("app-%d", seq), map[string]string{"app": "x"}), metav1.CreateOptions{})
		if err != nil {
			return err
		}
		if cm.Labels["mutated-by"] != plane {
			return fmt.Errorf("labels %v", cm.Labels)
		}
		return nil
	})
	// matchConditions: a name the condition does not match is not sent.
	if _, err := c.CoreV1().ConfigMaps("work").Create(ctx, labelledConfigMap("unchecked", deny), metav1.CreateOptions{}); err != nil {
		t.Fatalf("a ConfigMap the match condition excludes: %v", err)
	}
	if calls := hook.callsTo("/validate/" + plane); slices.Contains(calls, "unchecked") {
		t.Fatalf("the validating webhook was called for an object its match condition excludes: %v", calls)
	}
	// objectSelector: only objects labelled app=x are patched.
	cm, err := c.CoreV1().ConfigMaps("work").Create(ctx, labelledConfigMap("no-app", map[string]string{"other": "y"}), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := cm.Labels["mutated-by"]; ok {
		t.Fatalf("an object outside the objectSelector was patched: %v", cm.Labels)
	}
	// Dry run: the webhooks (sideEffects None) are called and refuse; an
	// allowed object is patched and not stored.
	dryRun := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	if _, err := c.CoreV1().ConfigMaps("work").Create(ctx, labelledConfigMap("checked-dry", deny), dryRun); err == nil {
		t.Fatal("a dry-run create the webhook refuses was admitted")
	}
	cm, err = c.CoreV1().ConfigMaps("work").Create(ctx, labelledConfigMap("checked-dry-ok", map[string]string{"app": "x"}), dryRun)
	if err != nil || cm.Labels["mutated-by"] != plane {
		t.Fatalf("dry-run create: %v, labels %v", err, cm.Labels)
	}
	if _, err := c.CoreV1().ConfigMaps("work").Get(ctx, "checked-dry-ok", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("a dry-run create was stored: %v", err)
	}
	// Warnings of the webhooks reach the client.
	out, err := shared.Kubectl(t, plane, "", "create", "configmap", "checked-warned", "-n", "work")
	if err != nil || !strings.Contains(out, "Warning: seen by "+plane) {
		t.Fatalf("kubectl create: %v\n%s", err, out)
	}
}

// convertedCRD is gadgets.conv.example.org, v1 stored and v2 served,
// converted by the webhook at client.
func convertedCRD(client apiextensionsv1.WebhookClientConfig) *apiextensionsv1.CustomResourceDefinition {
	crd := crdInGroup("conv.example.org", "gadgets", "Gadget", apiextensionsv1.NamespaceScoped, nil, "v1", "v2")
	crd.Spec.Conversion = &apiextensionsv1.CustomResourceConversion{
		Strategy: apiextensionsv1.WebhookConverter,
		Webhook:  &apiextensionsv1.WebhookConversion{ClientConfig: &client, ConversionReviewVersions: []string{"v1"}},
	}
	return crd
}

// TestConversionWebhookPerPlane: a multi-version CRD converts through its
// webhook on the test's localhost, each plane through the webhook its own
// CRD names.
func TestConversionWebhookPerPlane(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	hook := startHookServer(t)
	a, b := uniquePlane(t, "conv-a"), uniquePlane(t, "conv-b")
	gvr := func(v string) schema.GroupVersionResource {
		return schema.GroupVersionResource{Group: "conv.example.org", Version: v, Resource: "gadgets"}
	}
	for _, plane := range []string{a, b} {
		crd := convertedCRD(apiextensionsv1.WebhookClientConfig{
			URL: ptr.To(hook.url + "/convert/" + plane), CABundle: hook.caBundle})
		if plane == b {
			// b lists v2 first: a storage reading v2 is built first, and
			// must not convert plane a's objects through b's webhook.
			slices.Reverse(crd.Spec.Versions)
		}
		createEstablished(ctx, t, shared, plane, crd)
	}
	for _, plane := range []string{a, b} {
		d := shared.Dynamic(t, plane)
		obj := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "conv.example.org/v2", "kind": "Gadget",
			"metadata": map[string]any{"name": plane + "-g"}, "spec": map[string]any{"colour": "red"}}}
		framework.Eventually(t, framework.DefaultTimeout, "creating a v2 Gadget in "+plane, func(ctx context.Context) error {
			_, err := d.Resource(gvr("v2")).Namespace("default").Create(ctx, obj, metav1.CreateOptions{})
			return err
		})
		stored, err := d.Resource(gvr("v1")).Namespace("default").Get(ctx, plane+"-g", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if color, _, _ := unstructured.NestedString(stored.Object, "spec", "color"); color != "red" {
			t.Fatalf("plane %s, v1: spec %v, want color red", plane, stored.Object["spec"])
		}
		served, err := d.Resource(gvr("v2")).Namespace("default").Get(ctx, plane+"-g", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if colour, _, _ := unstructured.NestedString(served.Object, "spec", "colour"); colour != "red" {
			t.Fatalf("plane %s, v2: spec %v, want colour red", plane, served.Object["spec"])
		}
	}
	for _, plane := range []string{a, b} {
		calls := hook.callsTo("/convert/" + plane)
		if len(calls) == 0 {
			t.Fatalf("plane %s's conversion webhook was not called", plane)
		}
		expectOnly(t, "plane "+plane+"'s conversion webhook", calls, plane+"-")
	}

	// The egress policy applies to conversion webhooks too.
	metadata := uniquePlane(t, "conv-metadata")
	createEstablished(ctx, t, shared, metadata, convertedCRD(apiextensionsv1.WebhookClientConfig{URL: ptr.To("https://169.254.169.254/convert")}))
	obj := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "conv.example.org/v2", "kind": "Gadget",
		"metadata": map[string]any{"name": "g"}, "spec": map[string]any{"colour": "red"}}}
	framework.Eventually(t, framework.DefaultTimeout, "conversion at a metadata address is refused", func(ctx context.Context) error {
		_, err := shared.Dynamic(t, metadata).Resource(gvr("v2")).Namespace("default").Create(ctx, obj, metav1.CreateOptions{})
		if want := "kplane webhook egress policy refuses 169.254.169.254:443"; err == nil || !strings.Contains(err.Error(), want) {
			return fmt.Errorf("got %v, want %q", err, want)
		}
		return nil
	})
}

// TestConversionWebhookByService: a conversion webhook named by a Service
// reference resolves through the Service and EndpointSlices of the CRD's
// own plane. Two planes hold the identical CRD; only one has the Service,
// and only that one converts.
func TestConversionWebhookByService(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ip := hostAddress(t)
	hook := startHookServerOn(t, ip)
	withService, without := uniquePlane(t, "conv-svc"), uniquePlane(t, "conv-nosvc")
	client := apiextensionsv1.WebhookClientConfig{
		Service:  &apiextensionsv1.ServiceReference{Namespace: "webhooks", Name: "hook", Path: ptr.To("/convert/by-service"), Port: ptr.To[int32](443)},
		CABundle: hook.caBundle}
	for _, plane := range []string{withService, without} {
		quotaNamespace(t, shared.Client(t, plane), "webhooks")
		createEstablished(ctx, t, shared, plane, convertedCRD(client))
	}
	registerHookService(t, shared.Client(t, withService), ip, hook.port)
	gvr := func(v string) schema.GroupVersionResource {
		return schema.GroupVersionResource{Group: "conv.example.org", Version: v, Resource: "gadgets"}
	}
	gadget := func(name string) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "conv.example.org/v2", "kind": "Gadget",
			"metadata": map[string]any{"name": name}, "spec": map[string]any{"colour": "blue"}}}
	}
	d := shared.Dynamic(t, withService)
	framework.Eventually(t, framework.DefaultTimeout, "creating a v2 Gadget through the Service", func(ctx context.Context) error {
		_, err := d.Resource(gvr("v2")).Namespace("default").Create(ctx, gadget("g"), metav1.CreateOptions{})
		return err
	})
	stored, err := d.Resource(gvr("v1")).Namespace("default").Get(ctx, "g", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if color, _, _ := unstructured.NestedString(stored.Object, "spec", "color"); color != "blue" {
		t.Fatalf("v1: spec %v, want color blue", stored.Object["spec"])
	}
	if len(hook.callsTo("/convert/by-service")) == 0 {
		t.Fatal("the conversion webhook behind the Service was not called")
	}
	// Named apart: plane withService's own Gadget may still be converted
	// for its readers meanwhile, a call this test must not count.
	_, err = shared.Dynamic(t, without).Resource(gvr("v2")).Namespace("default").Create(ctx, gadget("g-without"), metav1.CreateOptions{})
	if err == nil || !strings.Contains(err.Error(), "webhooks/hook") {
		t.Fatalf("plane %s without the Service: got %v, want a conversion failure naming Service webhooks/hook", without, err)
	}
	if slices.Contains(hook.callsTo("/convert/by-service"), "g-without") {
		t.Fatalf("plane %s's conversion reached plane %s's Service", without, withService)
	}
}

// TestWebhookReinvocation: a mutating webhook with reinvocationPolicy
// IfNeeded is called again after a later webhook changed the object, as
// upstream.
func TestWebhookReinvocation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	hook := startHookServer(t)
	plane := uniquePlane(t, "whreinvoke")
	c := shared.Client(t, plane)
	quotaNamespace(t, c, "work")
	// Configurations run in name order: "1-first" labels mutated-by=first,
	// then "2-second" overwrites it with second, which makes "1-first"
	// (IfNeeded) run again.
	for _, tag := range []string{"first", "second"} {
		name := map[string]string{"first": "1-first", "second": "2-second"}[tag]
		cfg := mutatingHook(name, admissionregistrationv1.WebhookClientConfig{URL: ptr.To(hook.url + "/mutate/" + tag), CABundle: hook.caBundle}, nil)
		cfg.Webhooks[0].ObjectSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "x"}}
		if tag == "first" {
			cfg.Webhooks[0].ReinvocationPolicy = ptr.To(admissionregistrationv1.IfNeededReinvocationPolicy)
		}
		if _, err := c.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, cfg, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	seq := 0
	framework.Eventually(t, framework.DefaultTimeout, "both webhooks act, the first again last", func(ctx context.Context) error {
		seq++
		name := fmt.Sprintf("r-%d", seq)
		cm, err := c.CoreV1().ConfigMaps("work").Create(ctx, labelledConfigMap(name, map[string]string{"app": "x"}), metav1.CreateOptions{})
		if err != nil {
			return err
		}
		firsts := 0
		for _, n := range hook.callsTo("/mutate/first") {
			if n == name {
				firsts++
			}
		}
		if cm.Labels["mutated-by"] != "first" || firsts != 2 || !slices.Contains(hook.callsTo("/mutate/second"), name) {
			return fmt.Errorf("labels %v, first called %d times for it", cm.Labels, firsts)
		}
		return nil
	})
}

// createHeld runs create in the background until a call of it waits in
// hook's slow webhook, and returns the channel its result arrives on. A
// call the server answered without the webhook (made before the server
// knew of it) is undone and made again.
func createHeld(t *testing.T, hook *hookServer, what string, create, undo func(context.Context) error) <-chan error {
	t.Helper()
	var done chan error
	framework.Eventually(t, framework.DefaultTimeout, what+" held in the webhook", func(ctx context.Context) error {
		if done == nil {
			done = make(chan error, 1)
			go func() { done <- create(context.Background()) }()
		}
		if hook.slow.Load() > 0 {
			return nil
		}
		select {
		case err := <-done:
			done = nil
			if undoErr := undo(ctx); undoErr != nil && !apierrors.IsNotFound(undoErr) {
				return framework.Stop(undoErr)
			}
			return fmt.Errorf("made without the webhook (%v)", err)
		default:
			return fmt.Errorf("not in the webhook yet")
		}
	})
	return done
}
