package kubelet

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	api "k8s.io/kubernetes/pkg/apis/core"
	"k8s.io/kubernetes/third_party/forked/golang/expansion"
	utilexec "k8s.io/utils/exec"

	"k8s.io/cri-streaming/pkg/streaming/remotecommand"
)

// ExecAnnotationPrefix + a container's name, on a pod, scripts what
// `kubectl exec` answers in that container: a JSON object from a command
// line (its words joined by single spaces) to a ScriptedCommand.
const ExecAnnotationPrefix = "exec.kplane.dev/"

// ScriptedCommand is the answer of one scripted command.
type ScriptedCommand struct {
	Stdout   string `json:"stdout,omitempty"`
	Stderr   string `json:"stderr,omitempty"`
	ExitCode int    `json:"exitCode,omitempty"`
}

// Objects reads, in the plane of ctx, the objects a pod's environment and
// volumes are made from.
type Objects interface {
	ConfigMap(ctx context.Context, namespace, name string) (*api.ConfigMap, error)
	Secret(ctx context.Context, namespace, name string) (*api.Secret, error)
}

// Shell answers `kubectl exec` in a simulated container from memory:
// scripted commands, then a few builtins over the pod's spec (env,
// printenv, echo, cat and ls of mounted ConfigMaps and Secrets, hostname,
// true, false, sh -c). Nothing runs on the host; any other command exits
// 127, as a shell would.
type Shell struct {
	Pod     *api.Pod
	Objects Objects
}

var _ remotecommand.Executor = Shell{}

// ErrNotSimulated says a pod's container was not started by the simulated
// kubelet, so no simulated shell exists for it.
var ErrNotSimulated = fmt.Errorf("not a simulated container")

// Container checks that container (default: the only one) of pod runs
// in the simulation and returns its name; the error is the Kubernetes
// error a kubelet would answer with.
func Container(pod *api.Pod, container string) (string, error) {
	if container == "" {
		if len(pod.Spec.Containers) != 1 {
			return "", apierrors.NewBadRequest(fmt.Sprintf(
				"a container name must be specified for pod %s, choose one of: %v", pod.Name, containerNames(pod)))
		}
		container = pod.Spec.Containers[0].Name
	}
	status, found := containerStatus(pod, container)
	switch {
	case !found && !isSimulated(pod):
		return "", ErrNotSimulated
	case !found:
		return "", apierrors.NewBadRequest(fmt.Sprintf("container %s is not valid for pod %s", container, pod.Name))
	case !strings.HasPrefix(status.ContainerID, ContainerIDPrefix):
		return "", ErrNotSimulated
	case status.State.Running == nil:
		return "", apierrors.NewBadRequest(fmt.Sprintf(
			"unable to upgrade connection: container not found (%q)", container))
	}
	return container, nil
}

func containerNames(pod *api.Pod) []string {
	names := make([]string, 0, len(pod.Spec.Containers))
	for _, c := range pod.Spec.Containers {
		names = append(names, c.Name)
	}
	return names
}

// ExecInContainer implements remotecommand.Executor.
func (s Shell) ExecInContainer(ctx context.Context, _, _, container string, cmd []string, _ io.Reader,
	stdout, stderr io.WriteCloser, _ bool, _ <-chan remotecommand.TerminalSize, _ time.Duration,
) error {
	c := s.container(container)
	if c == nil {
		return fmt.Errorf("container %s is not valid for pod %s", container, s.Pod.Name)
	}
	out, errOut := io.Writer(io.Discard), io.Writer(io.Discard)
	if stdout != nil {
		out = stdout
	}
	if stderr != nil {
		errOut = stderr
	}
	if code := s.run(ctx, c, cmd, out, errOut); code != 0 {
		return utilexec.CodeExitError{Err: fmt.Errorf("command terminated with exit code %d", code), Code: code}
	}
	return nil
}

func (s Shell) container(name string) *api.Container {
	for i := range s.Pod.Spec.Containers {
		if s.Pod.Spec.Containers[i].Name == name {
			return &s.Pod.Spec.Containers[i]
		}
	}
	return nil
}

// run runs one command line and returns its exit code.
func (s Shell) run(ctx context.Context, c *api.Container, cmd []string, stdout, stderr io.Writer) int {
	if len(cmd) == 0 {
		fmt.Fprintln(stderr, "kplane: no command given")
		return 127
	}
	if answer, ok := s.scripted(c.Name, cmd); ok {
		io.WriteString(stdout, answer.Stdout)
		io.WriteString(stderr, answer.Stderr)
		return answer.ExitCode
	}
	name := path.Base(cmd[0])
	switch name {
	case "true":
		return 0
	case "false":
		return 1
	case "echo":
		fmt.Fprintln(stdout, strings.Join(cmd[1:], " "))
		return 0
	case "hostname":
		fmt.Fprintln(stdout, s.Pod.Name)
		return 0
	case "env", "printenv":
		return s.printEnv(ctx, c, cmd[1:], stdout)
	case "cat":
		return s.cat(ctx, c, cmd[1:], stdout, stderr)
	case "ls":
		return s.ls(ctx, c, cmd[1:], stdout, stderr)
	case "sh", "bash", "ash", "dash":
		if len(cmd) == 3 && cmd[1] == "-c" {
			env, _ := s.environment(ctx, c)
			words := strings.Fields(os.Expand(cmd[2], func(k string) string { return env[k] }))
			return s.run(ctx, c, unquote(words), stdout, stderr)
		}
	}
	fmt.Fprintf(stderr, "%s: command not found (kplane simulates this container: only scripted commands (annotation %s%s) and env, printenv, echo, cat, ls, hostname, true, false and sh -c run)\n",
		cmd[0], ExecAnnotationPrefix, c.Name)
	return 127
}

func unquote(words []string) []string {
	for i, w := range words {
		words[i] = strings.Trim(w, `"'`)
	}
	return words
}

func (s Shell) scripted(container string, cmd []string) (ScriptedCommand, bool) {
	raw, ok := s.Pod.Annotations[ExecAnnotationPrefix+container]
	if !ok {
		return ScriptedCommand{}, false
	}
	var script map[string]ScriptedCommand
	if err := json.Unmarshal([]byte(raw), &script); err != nil {
		return ScriptedCommand{Stderr: fmt.Sprintf("kplane: annotation %s%s is not a JSON object of commands: %v\n",
			ExecAnnotationPrefix, container, err), ExitCode: 126}, true
	}
	answer, ok := script[strings.Join(cmd, " ")]
	return answer, ok
}

func (s Shell) printEnv(ctx context.Context, c *api.Container, names []string, stdout io.Writer) int {
	env, order := s.environment(ctx, c)
	if len(names) > 0 {
		code := 0
		for _, n := range names {
			if v, ok := env[n]; ok {
				fmt.Fprintln(stdout, v)
			} else {
				code = 1
			}
		}
		return code
	}
	for _, k := range order {
		fmt.Fprintf(stdout, "%s=%s\n", k, env[k])
	}
	return 0
}

// environment is the container's environment as a kubelet would set it,
// in the order env prints it.
func (s Shell) environment(ctx context.Context, c *api.Container) (map[string]string, []string) {
	env := map[string]string{}
	var order []string
	set := func(k, v string) {
		if _, seen := env[k]; !seen {
			order = append(order, k)
		}
		env[k] = v
	}
	set("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
	set("HOSTNAME", s.Pod.Name)
	for _, from := range c.EnvFrom {
		for k, v := range s.envFrom(ctx, from) {
			set(from.Prefix+k, v)
		}
	}
	for _, e := range c.Env {
		if e.ValueFrom == nil {
			// $(VAR) references, as a kubelet expands them.
			set(e.Name, expansion.Expand(e.Value, expansion.MappingFuncFor(env)))
			continue
		}
		if v, ok := s.valueFrom(ctx, e.ValueFrom); ok {
			set(e.Name, v)
		}
	}
	set("HOME", "/root")
	return env, order
}

func (s Shell) envFrom(ctx context.Context, from api.EnvFromSource) map[string]string {
	ns := s.Pod.Namespace
	switch {
	case from.ConfigMapRef != nil:
		if cm, err := s.Objects.ConfigMap(ctx, ns, from.ConfigMapRef.Name); err == nil {
			return cm.Data
		}
	case from.SecretRef != nil:
		if secret, err := s.Objects.Secret(ctx, ns, from.SecretRef.Name); err == nil {
			out := map[string]string{}
			for k, v := range secret.Data {
				out[k] = string(v)
			}
			return out
		}
	}
	return nil
}

func (s Shell) valueFrom(ctx context.Context, from *api.EnvVarSource) (string, bool) {
	ns := s.Pod.Namespace
	switch {
	case from.ConfigMapKeyRef != nil:
		if cm, err := s.Objects.ConfigMap(ctx, ns, from.ConfigMapKeyRef.Name); err == nil {
			v, ok := cm.Data[from.ConfigMapKeyRef.Key]
			return v, ok
		}
	case from.SecretKeyRef != nil:
		if secret, err := s.Objects.Secret(ctx, ns, from.SecretKeyRef.Name); err == nil {
			v, ok := secret.Data[from.SecretKeyRef.Key]
			return string(v), ok
		}
	case from.FieldRef != nil:
		return s.field(from.FieldRef.FieldPath)
	}
	return "", false
}

func (s Shell) field(fieldPath string) (string, bool) {
	p := s.Pod
	switch fieldPath {
	case "metadata.name":
		return p.Name, true
	case "metadata.namespace":
		return p.Namespace, true
	case "metadata.uid":
		return string(p.UID), true
	case "spec.nodeName":
		return p.Spec.NodeName, true
	case "spec.serviceAccountName":
		return p.Spec.ServiceAccountName, true
	case "status.podIP":
		return p.Status.PodIP, true
	case "status.hostIP":
		return p.Status.HostIP, true
	}
	return "", false
}

// files returns the files a mounted ConfigMap or Secret volume shows
// under the mount path that holds p, keyed by their full paths.
func (s Shell) files(ctx context.Context, c *api.Container, p string) map[string]string {
	out := map[string]string{}
	for _, m := range c.VolumeMounts {
		if p != m.MountPath && !strings.HasPrefix(p, strings.TrimSuffix(m.MountPath, "/")+"/") {
			continue
		}
		for name, content := range s.volumeFiles(ctx, m.Name) {
			out[path.Join(m.MountPath, name)] = content
		}
	}
	return out
}

func (s Shell) volumeFiles(ctx context.Context, volume string) map[string]string {
	for _, v := range s.Pod.Spec.Volumes {
		if v.Name != volume {
			continue
		}
		switch {
		case v.ConfigMap != nil:
			cm, err := s.Objects.ConfigMap(ctx, s.Pod.Namespace, v.ConfigMap.Name)
			if err != nil {
				return nil
			}
			return project(cm.Data, v.ConfigMap.Items)
		case v.Secret != nil:
			secret, err := s.Objects.Secret(ctx, s.Pod.Namespace, v.Secret.SecretName)
			if err != nil {
				return nil
			}
			data := map[string]string{}
			for k, b := range secret.Data {
				data[k] = string(b)
			}
			return project(data, v.Secret.Items)
		}
	}
	return nil
}

// project maps data keys to file names as a volume's items say.
func project(data map[string]string, items []api.KeyToPath) map[string]string {
	if len(items) == 0 {
		return data
	}
	out := map[string]string{}
	for _, item := range items {
		if v, ok := data[item.Key]; ok {
			out[item.Path] = v
		}
	}
	return out
}

func (s Shell) cat(ctx context.Context, c *api.Container, paths []string, stdout, stderr io.Writer) int {
	code := 0
	for _, p := range paths {
		p = path.Clean(p)
		content, ok := s.files(ctx, c, p)[p]
		if !ok {
			fmt.Fprintf(stderr, "cat: %s: No such file or directory\n", p)
			code = 1
			continue
		}
		io.WriteString(stdout, content)
	}
	return code
}

func (s Shell) ls(ctx context.Context, c *api.Container, args []string, stdout, stderr io.Writer) int {
	dir := "."
	for _, a := range args {
		if !strings.HasPrefix(a, "-") {
			dir = a
		}
	}
	dir = path.Clean(dir)
	files := s.files(ctx, c, dir)
	if _, ok := files[dir]; ok {
		fmt.Fprintln(stdout, dir)
		return 0
	}
	names := map[string]bool{}
	for p := range files {
		if rest, ok := strings.CutPrefix(p, strings.TrimSuffix(dir, "/")+"/"); ok {
			names[strings.SplitN(rest, "/", 2)[0]] = true
		}
	}
	if len(names) == 0 {
		fmt.Fprintf(stderr, "ls: cannot access '%s': No such file or directory\n", dir)
		return 2
	}
	sorted := make([]string, 0, len(names))
	for n := range names {
		sorted = append(sorted, n)
	}
	sort.Strings(sorted)
	fmt.Fprintln(stdout, strings.Join(sorted, "\n"))
	return 0
}
