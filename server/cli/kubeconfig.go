package cli

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/urfave/cli/v2"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"kplane.dev/kplane/planes"
)

// planeAdmin is the service account whose tokens `kplane kubeconfig` hands
// out: cluster-admin inside its plane, nothing anywhere else.
const planeAdmin = planes.AdminServiceAccount

// KubeconfigCommand is `kplane kubeconfig <id>`.
func KubeconfigCommand() *cli.Command {
	return &cli.Command{
		Name:      "kubeconfig",
		Usage:     "print a kubeconfig for plane <id> with a credential valid in that plane only",
		ArgsUsage: "<id>",
		Flags: append(adminFlags(),
			&cli.DurationFlag{Name: "ttl", Value: 24 * time.Hour, Usage: "lifetime of the credential"},
			&cli.BoolFlag{Name: "admin", Usage: "use the server's admin credential (valid in every plane) instead"},
		),
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return fmt.Errorf("want exactly one plane id")
			}
			plane := c.Args().First()
			if err := planes.ValidateID(plane); err != nil {
				return err
			}
			a, err := loadKubeconfigAdmin(c)
			if err != nil {
				return err
			}
			token := a.adminToken()
			if !c.Bool("admin") {
				if token, err = mintPlaneToken(c.Context, a, plane, c.Duration("ttl")); err != nil {
					return err
				}
			}
			out, err := clientcmd.Write(*a.kubeconfig(plane, token))
			if err != nil {
				return err
			}
			_, err = os.Stdout.Write(out)
			return err
		},
	}
}

// mintPlaneToken returns a token of plane's kplane-admin service account
// (creating the account and its cluster-admin binding on first use). The
// token's issuer names the plane: it is refused by every other plane.
func mintPlaneToken(ctx context.Context, a *admin, plane string, ttl time.Duration) (string, error) {
	cfg, err := a.config(plane)
	if err != nil {
		return "", err
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return "", err
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: planeAdmin, Namespace: metav1.NamespaceSystem}}
	if _, err := client.CoreV1().ServiceAccounts(metav1.NamespaceSystem).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("plane %s: %w", plane, err)
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: planeAdmin},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: planeAdmin, Namespace: metav1.NamespaceSystem}},
	}
	if _, err := client.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("plane %s: %w", plane, err)
	}
	seconds := int64(ttl.Seconds())
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &seconds}}
	resp, err := client.CoreV1().ServiceAccounts(metav1.NamespaceSystem).CreateToken(ctx, planeAdmin, req, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("plane %s: minting a token: %w", plane, err)
	}
	return resp.Status.Token, nil
}
