package kplanetest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	certutil "k8s.io/client-go/util/cert"
)

// WebhookOptions are the admission and conversion webhooks a test serves
// itself, on localhost, for its own plane: the counterpart of envtest's
// WebhookInstallOptions. The plane's configurations and CRDs are pointed
// at the test's server, so webhooks of parallel tests never meet.
type WebhookOptions struct {
	// Paths are directories (their *.yaml, *.yml and *.json files) or
	// files of MutatingWebhookConfigurations and
	// ValidatingWebhookConfigurations, as controller-gen writes them to
	// config/webhook. Other kinds are an error; a missing path too.
	Paths []string
	// MutatingWebhooks and ValidatingWebhooks are installed besides those
	// of Paths.
	MutatingWebhooks   []*admissionregistrationv1.MutatingWebhookConfiguration
	ValidatingWebhooks []*admissionregistrationv1.ValidatingWebhookConfiguration
	// ConversionCRDs names CRDs (<plural>.<group>) whose versions are
	// converted by the test's server at ConversionPath, as a kubebuilder
	// project's CRD patches ask. A CRD whose spec.conversion.strategy is
	// already Webhook is pointed at the test's server too.
	ConversionCRDs []string
	// ConversionPath is where the server converts (default "/convert",
	// controller-runtime's).
	ConversionPath string
}

// WebhookServer is where the test serves the webhooks of its plane: a
// port of its own on 127.0.0.1, and a serving certificate the plane
// trusts. With controller-runtime:
//
//	webhook.NewServer(webhook.Options{Host: w.Host, Port: w.Port, CertDir: w.CertDir})
type WebhookServer struct {
	Host string
	Port int
	// CertDir holds tls.crt and tls.key, controller-runtime's default
	// names. It belongs to the Env and goes with it.
	CertDir string
	// CAData is the CA of the serving certificate (the caBundle given to
	// the plane).
	CAData []byte
}

// Address is host:port.
func (w *WebhookServer) Address() string { return net.JoinHostPort(w.Host, strconv.Itoa(w.Port)) }

// URL is the https URL of path on the server.
func (w *WebhookServer) URL(path string) string { return "https://" + w.Address() + path }

// WaitServing waits until the server accepts TLS connections with its
// certificate: the plane's webhooks with failurePolicy Fail refuse every
// request they match until then.
func (w *WebhookServer) WaitServing(ctx context.Context) error {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(w.CAData)
	dialer := &tls.Dialer{Config: &tls.Config{RootCAs: pool, ServerName: w.Host, MinVersion: tls.VersionTLS12}}
	var last error
	err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, PlaneTimeout, true, func(ctx context.Context) (bool, error) {
		conn, err := dialer.DialContext(ctx, "tcp", w.Address())
		if err != nil {
			last = err
			return false, nil
		}
		return true, conn.Close()
	})
	if err != nil {
		return fmt.Errorf("kplanetest: webhook server %s not serving: %v (%w)", w.Address(), last, err)
	}
	return nil
}

// WithWebhooks installs opts' webhook configurations in the plane, and
// the conversion of its CRDs, pointed at a WebhookServer of its own
// (PlaneHandle.Webhook) that the test starts. The plane's CRDs are
// installed in it rather than inherited from a CRD template: their
// conversion URL is the plane's own.
func WithWebhooks(opts WebhookOptions) PlaneOption {
	return func(s *planeSettings) error {
		hooks, err := readWebhooks(opts)
		if err != nil {
			return err
		}
		s.webhooks = hooks
		return nil
	}
}

// planeWebhooks is what WithWebhooks read.
type planeWebhooks struct {
	mutating       []*admissionregistrationv1.MutatingWebhookConfiguration
	validating     []*admissionregistrationv1.ValidatingWebhookConfiguration
	conversion     map[string]bool
	conversionPath string
}

func readWebhooks(opts WebhookOptions) (*planeWebhooks, error) {
	hooks := &planeWebhooks{mutating: opts.MutatingWebhooks, validating: opts.ValidatingWebhooks,
		conversion: map[string]bool{}, conversionPath: opts.ConversionPath}
	if hooks.conversionPath == "" {
		hooks.conversionPath = "/convert"
	}
	for _, name := range opts.ConversionCRDs {
		hooks.conversion[name] = true
	}
	for _, path := range opts.Paths {
		files, err := crdFiles(path)
		if err != nil {
			return nil, fmt.Errorf("kplanetest: webhook path %s: %w", path, err)
		}
		for _, file := range files {
			if err := hooks.readFile(file); err != nil {
				return nil, fmt.Errorf("kplanetest: %s: %w", file, err)
			}
		}
	}
	return hooks, nil
}

func (h *planeWebhooks) readFile(file string) error {
	objs, err := readManifests(file)
	if err != nil {
		return err
	}
	for _, obj := range objs {
		if obj.GetAPIVersion() != admissionregistrationv1.SchemeGroupVersion.String() {
			return fmt.Errorf("%s %q is not an %s object", obj.GetKind(), obj.GetName(), admissionregistrationv1.SchemeGroupVersion)
		}
		switch obj.GetKind() {
		case "MutatingWebhookConfiguration":
			config := &admissionregistrationv1.MutatingWebhookConfiguration{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, config); err != nil {
				return fmt.Errorf("%s: %w", obj.GetName(), err)
			}
			h.mutating = append(h.mutating, config)
		case "ValidatingWebhookConfiguration":
			config := &admissionregistrationv1.ValidatingWebhookConfiguration{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, config); err != nil {
				return fmt.Errorf("%s: %w", obj.GetName(), err)
			}
			h.validating = append(h.validating, config)
		default:
			return fmt.Errorf("%s %q is not a webhook configuration", obj.GetKind(), obj.GetName())
		}
	}
	return nil
}

// newWebhookServer picks a free port for a plane's webhooks. The serving
// certificate is the Env's: every test's server is on 127.0.0.1.
func (e *Env) newWebhookServer() (*WebhookServer, error) {
	cert, err := e.webhookCert.get()
	if err != nil {
		return nil, err
	}
	// The port is free when picked; a test that starts its server at
	// once gets it (as envtest's LocalServingPort).
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("kplanetest: picking a webhook port: %w", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	if err := l.Close(); err != nil {
		return nil, err
	}
	return &WebhookServer{Host: "127.0.0.1", Port: port, CertDir: cert.dir, CAData: cert.ca}, nil
}

// webhookCert is the serving certificate of the Env's webhook servers,
// made on first use.
type webhookCert struct {
	once sync.Once
	dir  string
	ca   []byte
	err  error
}

func (c *webhookCert) get() (*webhookCert, error) {
	c.once.Do(func() {
		c.err = c.make()
	})
	return c, c.err
}

func (c *webhookCert) make() error {
	certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKey("127.0.0.1", []net.IP{net.IPv4(127, 0, 0, 1)}, []string{"localhost"})
	if err != nil {
		return fmt.Errorf("kplanetest: webhook serving certificate: %w", err)
	}
	dir, err := os.MkdirTemp("", "kplanetest-webhooks-")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "tls.crt"), certPEM, 0o600); err != nil {
		return errors.Join(err, os.RemoveAll(dir))
	}
	if err := os.WriteFile(filepath.Join(dir, "tls.key"), keyPEM, 0o600); err != nil {
		return errors.Join(err, os.RemoveAll(dir))
	}
	// The file holds the certificate, then the CA that signed it: a
	// bundle of both verifies it.
	c.dir, c.ca = dir, certPEM
	return nil
}

func (c *webhookCert) remove() error {
	if c.dir == "" {
		return nil
	}
	return os.RemoveAll(c.dir)
}

// convertedCRDs returns crds with the conversion of those h names (or
// that already convert by webhook) pointed at server.
func (h *planeWebhooks) convertedCRDs(crds []*unstructured.Unstructured, server *WebhookServer) ([]*unstructured.Unstructured, error) {
	out := make([]*unstructured.Unstructured, len(crds))
	found := map[string]bool{}
	for i, crd := range crds {
		strategy, _, _ := unstructured.NestedString(crd.Object, "spec", "conversion", "strategy")
		if !h.conversion[crd.GetName()] && strategy != "Webhook" {
			out[i] = crd
			continue
		}
		found[crd.GetName()] = true
		crd = crd.DeepCopy()
		conversion := map[string]any{
			"strategy": "Webhook",
			"webhook": map[string]any{
				"conversionReviewVersions": []any{"v1"},
				// JSON carries caBundle's bytes in base64.
				"clientConfig": map[string]any{"url": server.URL(h.conversionPath), "caBundle": base64.StdEncoding.EncodeToString(server.CAData)},
			},
		}
		if err := unstructured.SetNestedField(crd.Object, conversion, "spec", "conversion"); err != nil {
			return nil, fmt.Errorf("kplanetest: CRD %s: %w", crd.GetName(), err)
		}
		out[i] = crd
	}
	for name := range h.conversion {
		if !found[name] {
			return nil, fmt.Errorf("kplanetest: WebhookOptions.ConversionCRDs: no CRD %s among the plane's CRDs", name)
		}
	}
	return out, nil
}

// install creates the configurations in the plane, each webhook's client
// pointed at server: a Service reference becomes the URL of its path on
// server, as envtest does.
func (h *planeWebhooks) install(ctx context.Context, client kubernetes.Interface, server *WebhookServer) error {
	api := client.AdmissionregistrationV1()
	for _, config := range h.mutating {
		config = config.DeepCopy()
		for i := range config.Webhooks {
			pointAt(&config.Webhooks[i].ClientConfig, server)
		}
		if _, err := api.MutatingWebhookConfigurations().Create(ctx, config, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating MutatingWebhookConfiguration %s: %w", config.Name, err)
		}
	}
	for _, config := range h.validating {
		config = config.DeepCopy()
		for i := range config.Webhooks {
			pointAt(&config.Webhooks[i].ClientConfig, server)
		}
		if _, err := api.ValidatingWebhookConfigurations().Create(ctx, config, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating ValidatingWebhookConfiguration %s: %w", config.Name, err)
		}
	}
	return nil
}

func pointAt(client *admissionregistrationv1.WebhookClientConfig, server *WebhookServer) {
	path := "/"
	if client.Service != nil && client.Service.Path != nil {
		path = *client.Service.Path
	} else if client.URL != nil {
		if i := strings.Index(strings.TrimPrefix(*client.URL, "https://"), "/"); i >= 0 {
			path = strings.TrimPrefix(*client.URL, "https://")[i:]
		}
	}
	url := server.URL(path)
	client.Service, client.URL, client.CABundle = nil, &url, server.CAData
}
