package cli

import (
	"fmt"
	"path/filepath"

	"github.com/urfave/cli/v2"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"kplane.dev/kplane/planes"
	"kplane.dev/kplane/server"
	"kplane.dev/kplane/server/credentials"
)

// adminFlags locate the admin credential of a server: its admin
// kubeconfig, or its URL and admin token.
func adminFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "data-dir", Value: server.DefaultDataDir(), EnvVars: []string{"KPLANE_DATA_DIR"},
			Usage: "data directory of the server (its admin.kubeconfig is used)"},
		&cli.StringFlag{Name: "kubeconfig", EnvVars: []string{"KPLANE_KUBECONFIG"},
			Usage: "admin kubeconfig (default <data-dir>/admin.kubeconfig)"},
		&cli.StringFlag{Name: "server", EnvVars: []string{"KPLANE_SERVER"},
			Usage: "URL of a server whose data dir is elsewhere (https://host:6443); with --token, instead of a kubeconfig. kplane kubeconfig without --token: the URL written into the kubeconfig (the credential comes from the local admin kubeconfig)"},
		&cli.StringFlag{Name: "token", EnvVars: []string{"KPLANE_TOKEN"},
			Usage: "the server's admin token (its --admin-token); the CA is fetched from --server and checked against it"},
	}
}

// admin is the admin kubeconfig and its root-plane client config.
type admin struct {
	raw    *clientcmdapi.Config
	server string
	// public is the server URL written into kubeconfigs, when clients
	// reach the server by another name than this process (default server).
	public string
}

func loadAdmin(c *cli.Context) (*admin, error) {
	if url := c.String("server"); url != "" {
		token := c.String("token")
		if token == "" {
			return nil, fmt.Errorf("--server needs --token (KPLANE_TOKEN), the server's admin token")
		}
		return remoteAdmin(c.Context, url, token)
	}
	return localAdmin(c)
}

// loadKubeconfigAdmin is loadAdmin, except that --server without --token
// keeps the local admin kubeconfig and only sets the URL the kubeconfig
// written names: run inside a container (`podman exec kplane kplane
// kubeconfig <id> --server https://kplane:6443`), the token is minted over
// the local address and the kubeconfig points where clients reach it.
func loadKubeconfigAdmin(c *cli.Context) (*admin, error) {
	url := c.String("server")
	if url == "" || c.String("token") != "" {
		return loadAdmin(c)
	}
	public, err := parseServerURL(url)
	if err != nil {
		return nil, err
	}
	a, err := localAdmin(c)
	if err != nil {
		return nil, fmt.Errorf("--server without --token (KPLANE_TOKEN) uses the local admin kubeconfig: %w", err)
	}
	a.public = public
	return a, nil
}

// localAdmin reads the admin kubeconfig of --kubeconfig or --data-dir.
func localAdmin(c *cli.Context) (*admin, error) {
	path := c.String("kubeconfig")
	if path == "" {
		path = filepath.Join(c.String("data-dir"), "admin.kubeconfig")
	}
	raw, err := clientcmd.LoadFromFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the admin kubeconfig: %w", err)
	}
	ctx, ok := raw.Contexts[raw.CurrentContext]
	if !ok {
		return nil, fmt.Errorf("%s has no current context", path)
	}
	cluster, ok := raw.Clusters[ctx.Cluster]
	if !ok {
		return nil, fmt.Errorf("%s: context %s names no cluster", path, raw.CurrentContext)
	}
	return &admin{raw: raw, server: cluster.Server}, nil
}

// config returns the admin client config for plane.
func (a *admin) config(plane string) (*rest.Config, error) {
	cfg, err := clientcmd.NewDefaultClientConfig(*a.raw, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, err
	}
	cfg.Host = a.server + planes.Path(plane)
	return cfg, nil
}

// kubeconfig returns a kubeconfig for plane with the given credential.
func (a *admin) kubeconfig(plane, token string) *clientcmdapi.Config {
	cluster := a.raw.Clusters[a.raw.Contexts[a.raw.CurrentContext].Cluster]
	server := a.server
	if a.public != "" {
		server = a.public
	}
	return credentials.Kubeconfig("kplane-"+plane, server+planes.Path(plane), cluster.CertificateAuthorityData, token)
}

func (a *admin) adminToken() string {
	return a.raw.AuthInfos[a.raw.Contexts[a.raw.CurrentContext].AuthInfo].Token
}
