package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/urfave/cli/v2"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"kplane.dev/kplane/planes"
	"kplane.dev/kplane/snapshot"
)

// SnapshotCommand is `kplane snapshot <plane>`.
func SnapshotCommand() *cli.Command {
	// Destinations make every alias of a flag one value once parsed
	// outside the cli package.
	var namespace, selector, output string
	flags := append(adminFlags(),
		&cli.StringSliceFlag{Name: "resource", Aliases: []string{"r"},
			Usage: "only these resources (repeatable or comma-separated: pods, deployments.apps, apps/deployments)"},
		&cli.StringFlag{Name: "namespace", Aliases: []string{"n"}, Destination: &namespace, Usage: "only namespaced resources, in this namespace"},
		&cli.StringFlag{Name: "selector", Aliases: []string{"l"}, Destination: &selector, Usage: "label selector of the objects"},
		&cli.BoolFlag{Name: "include-empty", Usage: "list resources without objects too"},
		&cli.BoolFlag{Name: "warm", Usage: "make sure every resource is in the server's cache first"},
		&cli.StringFlag{Name: "output", Aliases: []string{"o"}, Value: "summary", Destination: &output, Usage: "json, yaml or summary"},
	)
	return &cli.Command{
		Name:      "snapshot",
		Usage:     "print the whole state of plane <id> (every resource and object), read from the server's memory",
		ArgsUsage: "<id>",
		Flags:     flags,
		// Flags may follow the plane (kplane snapshot p1 -o json), which
		// the flag package alone does not allow.
		SkipFlagParsing: true,
		Action: func(c *cli.Context) error {
			parsed, args, err := parseInterspersed(c, flags)
			if err != nil {
				return err
			}
			return printSnapshot(parsed, args)
		},
	}
}

// parseInterspersed parses c's arguments with flags before, between and
// after the positional ones, and returns a context holding the flags and
// the positional arguments.
func parseInterspersed(c *cli.Context, flags []cli.Flag) (*cli.Context, []string, error) {
	set := flag.NewFlagSet(c.Command.Name, flag.ContinueOnError)
	set.SetOutput(io.Discard)
	for _, f := range flags {
		if err := f.Apply(set); err != nil {
			return nil, nil, err
		}
	}
	var positional []string
	rest := c.Args().Slice()
	for {
		if err := set.Parse(rest); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				if lineage := c.Lineage(); len(lineage) > 1 {
					_ = cli.ShowCommandHelp(lineage[1], c.Command.Name)
				}
				return nil, nil, cli.Exit("", 0)
			}
			return nil, nil, err
		}
		rest = set.Args()
		if len(rest) == 0 {
			break
		}
		positional = append(positional, rest[0])
		rest = rest[1:]
	}
	return cli.NewContext(c.App, set, c), positional, nil
}

func printSnapshot(c *cli.Context, args []string) error {
	if len(args) != 1 {
		return fmt.Errorf("want exactly one plane id")
	}
	id := args[0]
	if err := planes.ValidateID(id); err != nil {
		return err
	}
	output := c.String("output")
	if output != "json" && output != "yaml" && output != "summary" {
		return fmt.Errorf("--output %q: want json, yaml or summary", output)
	}
	a, err := loadAdmin(c)
	if err != nil {
		return err
	}
	cfg, err := a.config(id)
	if err != nil {
		return err
	}
	q := url.Values{}
	for _, r := range c.StringSlice("resource") {
		q.Add("resource", r)
	}
	if ns := c.String("namespace"); ns != "" {
		q.Set("namespace", ns)
	}
	if sel := c.String("selector"); sel != "" {
		q.Set("labelSelector", sel)
	}
	if c.Bool("include-empty") {
		q.Set("includeEmpty", "true")
	}
	if c.Bool("warm") {
		q.Set("warm", "true")
	}
	body, err := getSnapshot(c, cfg, q)
	if err != nil {
		return fmt.Errorf("snapshot of plane %s: %w", id, err)
	}
	switch output {
	case "json":
		var out bytes.Buffer
		if err := json.Indent(&out, body, "", "  "); err != nil {
			return fmt.Errorf("reading the snapshot: %w", err)
		}
		out.WriteByte('\n')
		_, err = os.Stdout.Write(out.Bytes())
		return err
	case "yaml":
		out, err := yaml.JSONToYAML(body)
		if err != nil {
			return fmt.Errorf("reading the snapshot: %w", err)
		}
		_, err = os.Stdout.Write(out)
		return err
	}
	var s snapshot.Snapshot
	if err := json.Unmarshal(body, &s); err != nil {
		return fmt.Errorf("reading the snapshot: %w", err)
	}
	fmt.Printf("plane %s at resourceVersion %s (%s), %d resources synced, %d bytes\n",
		s.Cluster, s.ResourceVersion, s.SnapshotTime, s.LiveResources, len(body))
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 3, ' ', 0)
	fmt.Fprintln(w, "RESOURCE\tVERSION\tKIND\tSYNCED\tITEMS")
	total := 0
	for _, r := range s.Resources {
		fmt.Fprintf(w, "%s\t%s\t%s\t%t\t%d\n", r.Name(), r.Version, r.Kind, r.Synced, r.ItemCount)
		total += r.ItemCount
	}
	fmt.Fprintf(w, "total\t\t\t\t%d\n", total)
	return w.Flush()
}

// getSnapshot reads a snapshot and turns an error answer into the
// server's Status.
func getSnapshot(c *cli.Context, cfg *rest.Config, q url.Values) ([]byte, error) {
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	u := strings.TrimSuffix(cfg.Host, "/") + snapshot.Path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(c.Context, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		var status metav1.Status
		if json.Unmarshal(body, &status) == nil && status.Message != "" {
			return nil, &apierrors.StatusError{ErrStatus: status}
		}
		return nil, fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(body)))
	}
	return body, nil
}
