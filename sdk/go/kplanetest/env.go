package kplanetest

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Options configure Start. Unset fields are taken from the environment
// variables named in their comments.
type Options struct {
	// CRDDirectoryPaths are directories (or files) whose *.yaml, *.yml and
	// *.json CustomResourceDefinitions are installed in every plane of the
	// Env and waited for until Established, as envtest's field of the
	// same name.
	CRDDirectoryPaths []string
	// CRDs are CustomResourceDefinitions installed in every plane besides
	// those of CRDDirectoryPaths.
	CRDs []*unstructured.Unstructured
	// ErrorIfCRDPathMissing makes a path of CRDDirectoryPaths that does not
	// exist an error (envtest's field of the same name); else it is
	// ignored.
	ErrorIfCRDPathMissing bool

	// BinaryPath is the kplane binary to run (KPLANE_BINARY). Without it
	// the kplane in PATH is run, or the release Version is downloaded.
	BinaryPath string
	// Version is a release tag (KPLANE_VERSION, e.g. v0.3.0) downloaded
	// from DownloadURL into CacheDir when no binary is found otherwise.
	Version string
	// DownloadURL is the base of the releases (KPLANE_DOWNLOAD_URL,
	// default DefaultDownloadURL).
	DownloadURL string
	// CacheDir keeps downloaded releases (KPLANE_CACHE_DIR, default the
	// user cache directory's kplane/).
	CacheDir string
	// Prewarm is how many planes with the Env's CRDs are kept created and
	// ready ahead of NewPlane (default DefaultPrewarm on a server the Env
	// started, none when attached; negative: none; KPLANE_PREWARM).
	// Each is handed to one test only; planes with options of their own
	// (a template, more CRDs, labels) are always created on demand.
	Prewarm int
	// NoCRDTemplate installs the CRDs into every plane, as before
	// templates (KPLANE_CRD_TEMPLATE=off). By default the CRDs are
	// installed once, in a template plane per distinct set of CRDs
	// (kplanetest-crds-<digest>), and every plane is made from it.
	NoCRDTemplate bool
	// WaitForDeletion makes each test's cleanup wait until its plane is
	// gone. Without it the cleanup sends the deletion and the server
	// finishes it while the next tests run; Stop waits for all of them.
	WaitForDeletion bool

	// ServerArgs are extra `kplane server` flags.
	ServerArgs []string
	// StartTimeout bounds the server's start (default 90 s).
	StartTimeout time.Duration

	// URL attaches to a running server instead of starting one
	// (KPLANE_URL, or KPLANE_SERVER as the kplane CLI calls it), with its
	// admin Token (KPLANE_TOKEN). The server's CA is fetched from
	// /cacerts and trusted only if it is signed with the token.
	URL   string
	Token string
	// Kubeconfig attaches to the server of this admin kubeconfig
	// (KPLANE_KUBECONFIG; <data-dir>/admin.kubeconfig of a server).
	Kubeconfig string
}

// RunLabel is the label of every Plane an Env creates; its value is the
// Env's RunID.
const RunLabel = "kplanetest.kplane.dev/run"

// TestAnnotation on a Plane names the test it was created for.
const TestAnnotation = "kplanetest.kplane.dev/test"

var planesGVR = schema.GroupVersionResource{Group: "kplane.dev", Version: "v1", Resource: "planes"}

// Env is one kplane server for a test binary: started by Start or
// attached to.
type Env struct {
	server string // https://host:port
	admin  *rest.Config
	planes dynamic.ResourceInterface
	proc   *process // nil when attached
	crds   []*unstructured.Unstructured
	runID  string
	seq    atomic.Int64
	pool   *pool

	crdTemplating bool
	templates     crdTemplates
	webhookCert   webhookCert

	waitForDeletion bool
}

// Start starts a kplane server for the test binary, or attaches to the
// one Options (or the environment) name, and reads the CRDs every plane
// gets. Call Stop when done.
func Start(ctx context.Context, opts Options) (*Env, error) {
	crds, err := readCRDs(opts.CRDDirectoryPaths, opts.ErrorIfCRDPathMissing)
	if err != nil {
		return nil, err
	}
	runID, err := newRunID()
	if err != nil {
		return nil, err
	}
	env := &Env{crds: append(crds, opts.CRDs...), runID: runID, waitForDeletion: opts.WaitForDeletion,
		crdTemplating: !opts.NoCRDTemplate && os.Getenv("KPLANE_CRD_TEMPLATE") != "off",
		templates:     crdTemplates{builds: map[string]*templateBuild{}}}
	if err := env.connect(ctx, opts); err != nil {
		return nil, err
	}
	client, err := dynamic.NewForConfig(env.admin)
	if err != nil {
		env.Stop()
		return nil, err
	}
	env.planes = client.Resource(planesGVR)
	prewarm := opts.Prewarm
	if v, err := strconv.Atoi(os.Getenv("KPLANE_PREWARM")); prewarm == 0 && err == nil {
		prewarm = v
	}
	if prewarm == 0 && env.Started() {
		// Only on a server of its own: a test binary that dies without
		// Stop would leave the ready planes on a shared server.
		prewarm = DefaultPrewarm
	}
	if prewarm > 0 {
		env.startPool(prewarm)
	}
	return env, nil
}

func (e *Env) connect(ctx context.Context, opts Options) error {
	serverURL := firstNonEmpty(opts.URL, os.Getenv("KPLANE_URL"), os.Getenv("KPLANE_SERVER"))
	kubeconfig := firstNonEmpty(opts.Kubeconfig, os.Getenv("KPLANE_KUBECONFIG"))
	var err error
	switch {
	case serverURL != "":
		token := firstNonEmpty(opts.Token, os.Getenv("KPLANE_TOKEN"))
		if token == "" {
			return fmt.Errorf("kplanetest: attaching to %s needs the server's admin token (Options.Token or KPLANE_TOKEN)", serverURL)
		}
		e.server, e.admin, err = attachURL(ctx, serverURL, token)
	case kubeconfig != "":
		e.server, e.admin, err = attachKubeconfig(ctx, kubeconfig)
	default:
		err = e.startServer(ctx, opts)
	}
	return err
}

func (e *Env) startServer(ctx context.Context, opts Options) error {
	binary, err := findBinary(ctx, opts, osBinarySource)
	if err != nil {
		return err
	}
	timeout := opts.StartTimeout
	if timeout == 0 {
		timeout = 90 * time.Second
	}
	p, err := startProcess(ctx, binary, opts.ServerArgs, timeout)
	if err != nil {
		return err
	}
	e.proc, e.server = p, p.url
	e.admin = adminConfig(p.url, p.caPEM, p.token)
	return nil
}

// adminConfig is the root plane's admin client config. The admin token is
// valid in every plane; planes get copies with their own Host.
func adminConfig(server string, caPEM []byte, token string) *rest.Config {
	return &rest.Config{
		Host:            server,
		BearerToken:     token,
		TLSClientConfig: rest.TLSClientConfig{CAData: caPEM},
		// Tests are short bursts of requests: client-side throttling would
		// only make them slower (envtest sets similar limits).
		QPS:   1000,
		Burst: 2000,
	}
}

// attachURL builds the admin credential of the server at serverURL from
// its admin token: the CA comes from /cacerts and is trusted only when it
// is signed with the token, so the token is sent over a verified
// connection only.
func attachURL(ctx context.Context, serverURL, token string) (string, *rest.Config, error) {
	u, err := url.Parse(serverURL)
	if err != nil || u.Scheme != "https" || u.Host == "" {
		return "", nil, fmt.Errorf("kplanetest: KPLANE_URL %q: want https://host:port", serverURL)
	}
	server := "https://" + u.Host
	token = strings.TrimSpace(token)
	caPEM, err := fetchSignedCA(ctx, server, token)
	if err != nil {
		return "", nil, fmt.Errorf("kplanetest: attaching to %s: %w", server, err)
	}
	if err := readyz(ctx, server, caPEM); err != nil {
		return "", nil, fmt.Errorf("kplanetest: attaching to %s: %w", server, err)
	}
	return server, adminConfig(server, caPEM, token), nil
}

// caSignatureHeader carries the HMAC-SHA256 of the CA keyed with the admin
// token on GET /cacerts (the server's credentials.CASignatureHeader).
const caSignatureHeader = "Kplane-Ca-Signature"

func fetchSignedCA(ctx context.Context, server, token string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, server+"/cacerts", nil)
	if err != nil {
		return nil, err
	}
	// Unverified on purpose: the signature checked below establishes
	// trust, and nothing secret is sent.
	client := &http.Client{Timeout: 10 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("fetching the CA: %w", err)
	}
	defer resp.Body.Close()
	caPEM, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil || resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("fetching the CA: %s %v", resp.Status, err)
	}
	signature, err := hex.DecodeString(resp.Header.Get(caSignatureHeader))
	if err != nil || len(signature) == 0 {
		return nil, errors.New("the server serves its CA unsigned (admin token too short?): attach with KPLANE_KUBECONFIG instead")
	}
	mac := hmac.New(sha256.New, []byte(token))
	mac.Write(caPEM)
	if !hmac.Equal(signature, mac.Sum(nil)) {
		return nil, errors.New("the CA it serves is not signed with this token: wrong KPLANE_TOKEN, or not the server you think")
	}
	return caPEM, nil
}

// planeURLSuffix matches a plane's URL, cut back to the server's.
var planeURLSuffix = regexp.MustCompile(`/clusters/[^/]+/control-plane/?$`)

func attachKubeconfig(ctx context.Context, path string) (string, *rest.Config, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return "", nil, fmt.Errorf("kplanetest: reading the admin kubeconfig %s: %w", path, err)
	}
	server := strings.TrimRight(planeURLSuffix.ReplaceAllString(cfg.Host, ""), "/")
	cfg.Host, cfg.QPS, cfg.Burst = server, 1000, 2000
	rt, err := rest.TransportFor(cfg)
	if err != nil {
		return "", nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, server+"/readyz", nil)
	if err != nil {
		return "", nil, err
	}
	resp, err := (&http.Client{Transport: rt, Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		return "", nil, fmt.Errorf("kplanetest: attaching to %s (from %s): %w", server, path, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", nil, fmt.Errorf("kplanetest: attaching to %s (from %s): /readyz: %s", server, path, resp.Status)
	}
	return server, cfg, nil
}

func newRunID() (string, error) {
	b := make([]byte, 3)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}

// RunID is the value of RunLabel on the Env's planes.
func (e *Env) RunID() string { return e.runID }

// URL is the server's base URL (https://host:port).
func (e *Env) URL() string { return e.server }

// Started reports whether the Env runs its own server (false: attached).
func (e *Env) Started() bool { return e.proc != nil }

// AdminConfig is a copy of the root plane's admin client config. Its
// credential is valid in every plane.
func (e *Env) AdminConfig() *rest.Config { return rest.CopyConfig(e.admin) }

// LeftoverPlanes lists the planes of this Env that still exist.
func (e *Env) LeftoverPlanes(ctx context.Context) ([]string, error) {
	list, err := e.planes.List(ctx, listByRun(e.runID))
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(list.Items))
	for _, p := range list.Items {
		names = append(names, p.GetName())
	}
	return names, nil
}

// Stop ends the Env. When it started the server it stops it and removes
// its data directory, planes and all. Attached, it deletes the planes of
// its run that are left (ready ones nobody took, any a caller did not
// delete), then the CRD templates it created (a template cannot go before
// its members), and waits until every one is gone.
func (e *Env) Stop() error {
	var errs []error
	e.pool.stop()
	if e.planes != nil && e.proc == nil {
		ctx, cancel := context.WithTimeout(context.Background(), PlaneTimeout)
		defer cancel()
		list, err := e.planes.List(ctx, listByRun(e.runID))
		errs = append(errs, err)
		var members, templates []string
		if list != nil {
			for i := range list.Items {
				if isCRDTemplate(&list.Items[i]) {
					templates = append(templates, list.Items[i].GetName())
				} else {
					members = append(members, list.Items[i].GetName())
				}
			}
		}
		errs = append(errs, e.deletePlanes(ctx, members)...)
		errs = append(errs, e.deletePlanes(ctx, templates)...)
	}
	errs = append(errs, e.webhookCert.remove())
	if e.proc != nil {
		e.proc.stop()
		errs = append(errs, os.RemoveAll(e.proc.dataDir))
	}
	return errors.Join(errs...)
}

// deletePlanes deletes planes at once and waits until all are gone.
func (e *Env) deletePlanes(ctx context.Context, ids []string) []error {
	deleted := make([]error, len(ids))
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Go(func() { deleted[i] = e.deletePlane(ctx, id, true) })
	}
	wg.Wait()
	return deleted
}
