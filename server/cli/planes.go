package cli

import (
	"context"
	"fmt"
	"os"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"

	"kplane.dev/kplane/planes"
	"kplane.dev/kplane/planes/lifecycle"
	"kplane.dev/kplane/server/autoapply"
	"kplane.dev/kplane/server/leader"
)

// PlanesCommand is `kplane planes list|create|delete|reset`.
func PlanesCommand() *cli.Command {
	wait := &cli.DurationFlag{Name: "timeout", Value: 2 * time.Minute, Usage: "how long to wait for the plane"}
	return &cli.Command{
		Name:  "planes",
		Usage: "list, create, reset and delete planes",
		Subcommands: []*cli.Command{
			{Name: "list", Usage: "list every plane", Flags: adminFlags(), Action: listPlanes},
			{Name: "create", Usage: "create plane <id> and wait until it is ready", ArgsUsage: "<id>",
				Flags: append(adminFlags(), wait, &cli.StringFlag{Name: "template",
					Usage: "start as this plane's state, storing only what changes (the template is read-only while used)"},
					&cli.StringFlag{Name: "from",
						Usage: "start as a clone of this plane's state now (over its template); the planes change apart afterwards"},
					&cli.StringSliceFlag{Name: "filename", Aliases: []string{"f"},
						Usage: "then apply these manifests (files or directories; server-side apply, CRDs first) to the plane: a scenario to make planes from"}),
				Action: createPlane},
			{Name: "reset", Usage: "return plane <id> to its template's state (or to an empty plane)", ArgsUsage: "<id>",
				Flags: adminFlags(), Action: resetPlane},
			{Name: "delete", Usage: "delete plane <id> and everything in it, and wait until it is gone", ArgsUsage: "<id>",
				Flags: append(adminFlags(), wait), Action: deletePlane},
		},
	}
}

func planesClient(c *cli.Context) (dynamic.NamespaceableResourceInterface, error) {
	cfg, err := rootConfig(c)
	if err != nil {
		return nil, err
	}
	client, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return client.Resource(lifecycle.GVR), nil
}

// rootConfig reaches the root plane as the admin.
func rootConfig(c *cli.Context) (*rest.Config, error) {
	a, err := loadAdmin(c)
	if err != nil {
		return nil, err
	}
	return a.config(planes.Root)
}

func listPlanes(c *cli.Context) error {
	cfg, err := rootConfig(c)
	if err != nil {
		return err
	}
	client, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	list, err := client.Resource(lifecycle.GVR).List(c.Context, metav1.ListOptions{})
	if err != nil {
		return err
	}
	owner := planesOwner(c.Context, cfg)
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 3, ' ', 0)
	fmt.Fprintln(w, "NAME\tPHASE\tOBJECTS\tOWNER\tAGE")
	for _, p := range list.Items {
		phase, _, _ := unstructured.NestedString(p.Object, "status", "phase")
		count, _, _ := unstructured.NestedInt64(p.Object, "status", "objectCount")
		fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%s\n", p.GetName(), phase, count, owner,
			duration.HumanDuration(time.Since(p.GetCreationTimestamp().Time)))
	}
	return w.Flush()
}

// planesOwner is the server that runs every plane's lifecycle and
// controllers (the holder of the plane lifecycle's Lease), "<none>" while
// no live server holds it.
func planesOwner(ctx context.Context, cfg *rest.Config) string {
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return "<unknown>"
	}
	lease, err := client.CoordinationV1().Leases(leader.Namespace).Get(ctx, leader.PlanesLease, metav1.GetOptions{})
	if err != nil {
		return "<unknown>"
	}
	spec := lease.Spec
	if spec.HolderIdentity == nil || *spec.HolderIdentity == "" || spec.RenewTime == nil || spec.LeaseDurationSeconds == nil ||
		time.Since(spec.RenewTime.Time) > time.Duration(*spec.LeaseDurationSeconds)*time.Second {
		return "<none>"
	}
	return *spec.HolderIdentity
}

func planeArg(c *cli.Context) (string, error) {
	if c.NArg() != 1 {
		return "", fmt.Errorf("want exactly one plane id")
	}
	id := c.Args().First()
	return id, planes.ValidateID(id)
}

func createPlane(c *cli.Context) error {
	id, err := planeArg(c)
	if err != nil {
		return err
	}
	client, err := planesClient(c)
	if err != nil {
		return err
	}
	if files := c.StringSlice("filename"); len(files) > 0 {
		if err := autoapply.CheckManifests(id, files); err != nil {
			return err
		}
	}
	p := lifecycle.NewPlane(id)
	p.Spec.Template = c.String("template")
	p.Spec.From = c.String("from")
	if _, err := client.Create(c.Context, p.Unstructured(), metav1.CreateOptions{}); err != nil {
		return err
	}
	err = wait.PollUntilContextTimeout(c.Context, 50*time.Millisecond, c.Duration("timeout"), true, func(ctx context.Context) (bool, error) {
		p, err := client.Get(ctx, id, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		phase, _, _ := unstructured.NestedString(p.Object, "status", "phase")
		return phase == string(lifecycle.Ready), nil
	})
	if err != nil {
		return fmt.Errorf("plane %s not ready: %w", id, err)
	}
	fmt.Printf("plane/%s created\n", id)
	if files := c.StringSlice("filename"); len(files) > 0 {
		return applyManifests(c, id, files)
	}
	return nil
}

// applyManifests applies files to the new plane id.
func applyManifests(c *cli.Context, id string, files []string) error {
	a, err := loadAdmin(c)
	if err != nil {
		return err
	}
	cfg, err := a.config(planes.Root)
	if err != nil {
		return err
	}
	applied, err := autoapply.ApplyToPlane(c.Context, cfg, id, files)
	fmt.Printf("plane/%s: %d objects applied\n", id, applied)
	if err != nil {
		return fmt.Errorf("plane %s was created, but not every manifest was applied:\n%w", id, err)
	}
	return nil
}

func deletePlane(c *cli.Context) error {
	id, err := planeArg(c)
	if err != nil {
		return err
	}
	client, err := planesClient(c)
	if err != nil {
		return err
	}
	if err := client.Delete(c.Context, id, metav1.DeleteOptions{}); err != nil {
		return err
	}
	err = wait.PollUntilContextTimeout(c.Context, 50*time.Millisecond, c.Duration("timeout"), true, func(ctx context.Context) (bool, error) {
		_, err := client.Get(ctx, id, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		return fmt.Errorf("plane %s not deleted: %w", id, err)
	}
	fmt.Printf("plane/%s deleted\n", id)
	return nil
}

func resetPlane(c *cli.Context) error {
	id, err := planeArg(c)
	if err != nil {
		return err
	}
	a, err := loadAdmin(c)
	if err != nil {
		return err
	}
	cfg, err := a.config(id)
	if err != nil {
		return err
	}
	client, err := rest.UnversionedRESTClientFor(withNegotiation(cfg))
	if err != nil {
		return err
	}
	if err := client.Post().AbsPath(lifecycle.ResetPath).Do(c.Context).Error(); err != nil {
		return fmt.Errorf("resetting plane %s: %w", id, err)
	}
	fmt.Printf("plane/%s reset\n", id)
	return nil
}

// withNegotiation gives cfg what an unversioned REST client needs to
// decode a Status.
func withNegotiation(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.NegotiatedSerializer = scheme.Codecs.WithoutConversion()
	return cfg
}
