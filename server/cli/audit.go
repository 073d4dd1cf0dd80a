package cli

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	"k8s.io/client-go/rest"

	"kplane.dev/kplane/planes"
	"kplane.dev/kplane/planes/audit"
)

// AuditCommand is `kplane audit <plane>`.
func AuditCommand() *cli.Command {
	var since, output string
	var limit int
	var follow bool
	flags := append(adminFlags(),
		&cli.BoolFlag{Name: "follow", Aliases: []string{"f"}, Destination: &follow, Usage: "keep printing new events"},
		&cli.StringFlag{Name: "since", Destination: &since, Usage: "only events after this cursor (" + audit.CursorAnnotation + ") or from this RFC 3339 time on"},
		&cli.IntFlag{Name: "limit", Destination: &limit, Usage: "at most this many events (oldest first; not with -f)"},
		&cli.StringFlag{Name: "output", Aliases: []string{"o"}, Value: "text", Destination: &output, Usage: "text (one line per request) or json (audit.k8s.io/v1 Events, one per line)"},
	)
	return &cli.Command{
		Name:      "audit",
		Usage:     "print the audit trail of plane <id>: every request made to it, oldest first",
		ArgsUsage: "<id>",
		Flags:     flags,
		// Flags may follow the plane (kplane audit p1 -f).
		SkipFlagParsing: true,
		Action: func(c *cli.Context) error {
			parsed, args, err := parseInterspersed(c, flags)
			if err != nil {
				return err
			}
			return printAudit(parsed, args)
		},
	}
}

func printAudit(c *cli.Context, args []string) error {
	if len(args) != 1 {
		return fmt.Errorf("want exactly one plane id")
	}
	id := args[0]
	if err := planes.ValidateID(id); err != nil {
		return err
	}
	output := c.String("output")
	if output != "json" && output != "text" {
		return fmt.Errorf("--output %q: want text or json", output)
	}
	q := url.Values{}
	if s := c.String("since"); s != "" {
		q.Set("since", s)
	}
	if n := c.Int("limit"); n != 0 {
		q.Set("limit", strconv.Itoa(n))
	}
	if c.Bool("follow") {
		q.Set("watch", "true")
	}
	a, err := loadAdmin(c)
	if err != nil {
		return err
	}
	cfg, err := a.config(id)
	if err != nil {
		return err
	}
	body, err := openAudit(c, cfg, q)
	if err != nil {
		return fmt.Errorf("audit trail of plane %s: %w", id, err)
	}
	defer body.Close()
	return copyEvents(body, os.Stdout, output == "json")
}

// openAudit starts GET /audit and turns an error answer into the server's
// Status.
func openAudit(c *cli.Context, cfg *rest.Config, q url.Values) (io.ReadCloser, error) {
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	u := strings.TrimSuffix(cfg.Host, "/") + audit.Path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(c.Context, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode == http.StatusOK {
		return resp.Body, nil
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var status metav1.Status
	if json.Unmarshal(body, &status) == nil && status.Message != "" {
		return nil, &apierrors.StatusError{ErrStatus: status}
	}
	return nil, fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(body)))
}

// copyEvents prints each event as it arrives: the line itself, or a
// summary of it.
func copyEvents(r io.Reader, w io.Writer, raw bool) error {
	scanner := bufio.NewScanner(r)
	scanner.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for scanner.Scan() {
		line := scanner.Bytes()
		if raw {
			if _, err := fmt.Fprintf(w, "%s\n", line); err != nil {
				return err
			}
			continue
		}
		var ev auditv1.Event
		if err := json.Unmarshal(line, &ev); err != nil {
			return fmt.Errorf("reading an event: %w", err)
		}
		if _, err := fmt.Fprintln(w, summary(&ev)); err != nil {
			return err
		}
	}
	return scanner.Err()
}

// summary is one event on one line: cursor, time, user, verb, what, code,
// latency.
func summary(ev *auditv1.Event) string {
	what := ev.RequestURI
	if ref := ev.ObjectRef; ref != nil {
		what = ref.Resource
		if ref.APIGroup != "" {
			what += "." + ref.APIGroup
		}
		if ref.Subresource != "" {
			what += "/" + ref.Subresource
		}
		if ref.Namespace != "" || ref.Name != "" {
			what += " " + strings.TrimPrefix(ref.Namespace+"/"+ref.Name, "/")
		}
	}
	code := int32(0)
	if ev.ResponseStatus != nil {
		code = ev.ResponseStatus.Code
	}
	latency := ev.StageTimestamp.Sub(ev.RequestReceivedTimestamp.Time).Round(time.Microsecond)
	return fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%d\t%s", ev.Annotations[audit.CursorAnnotation],
		ev.RequestReceivedTimestamp.UTC().Format(time.RFC3339Nano), ev.User.Username, ev.Verb, what, code, latency)
}
