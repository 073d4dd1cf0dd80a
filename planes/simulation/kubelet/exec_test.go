package kubelet

import (
	"bytes"
	"context"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	api "k8s.io/kubernetes/pkg/apis/core"
)

// planeObjects holds one plane's ConfigMaps and Secrets by name.
type planeObjects struct {
	configMaps map[string]*api.ConfigMap
	secrets    map[string]*api.Secret
}

func (o planeObjects) ConfigMap(_ context.Context, _, name string) (*api.ConfigMap, error) {
	if cm, ok := o.configMaps[name]; ok {
		return cm, nil
	}
	return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "configmaps"}, name)
}

func (o planeObjects) Secret(_ context.Context, _, name string) (*api.Secret, error) {
	if s, ok := o.secrets[name]; ok {
		return s, nil
	}
	return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "secrets"}, name)
}

func TestShell(t *testing.T) {
	pod := &api.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web-1", Namespace: "default", Annotations: map[string]string{
			ExecAnnotationPrefix + "app": `{"pg_isready -h db": {"stdout": "db:5432 - accepting connections\n"}, "migrate": {"stderr": "boom\n", "exitCode": 3}}`,
		}},
		Spec: api.PodSpec{
			Containers: []api.Container{{
				Name: "app",
				Env: []api.EnvVar{
					{Name: "MODE", Value: "prod"},
					{Name: "URL", Value: "http://$(MODE)"},
					{Name: "LEVEL", ValueFrom: &api.EnvVarSource{ConfigMapKeyRef: &api.ConfigMapKeySelector{
						LocalObjectReference: api.LocalObjectReference{Name: "settings"}, Key: "level"}}},
					{Name: "POD", ValueFrom: &api.EnvVarSource{FieldRef: &api.ObjectFieldSelector{FieldPath: "metadata.name"}}},
				},
				VolumeMounts: []api.VolumeMount{{Name: "config", MountPath: "/etc/app"}, {Name: "creds", MountPath: "/var/run/creds"}},
			}},
			Volumes: []api.Volume{
				{Name: "config", VolumeSource: api.VolumeSource{ConfigMap: &api.ConfigMapVolumeSource{
					LocalObjectReference: api.LocalObjectReference{Name: "settings"}}}},
				{Name: "creds", VolumeSource: api.VolumeSource{Secret: &api.SecretVolumeSource{
					SecretName: "creds", Items: []api.KeyToPath{{Key: "token", Path: "auth/token"}}}}},
			},
		},
	}
	shell := Shell{Pod: pod, Objects: planeObjects{
		configMaps: map[string]*api.ConfigMap{"settings": {Data: map[string]string{"level": "debug", "app.yaml": "port: 80\n"}}},
		secrets:    map[string]*api.Secret{"creds": {Data: map[string][]byte{"token": []byte("s3cr3t")}}},
	}}
	for _, tc := range []struct {
		cmd          []string
		stdout       string
		stderrSubstr string
		code         int
	}{
		{cmd: []string{"printenv", "URL", "LEVEL", "POD"}, stdout: "http://prod\ndebug\nweb-1\n"},
		{cmd: []string{"cat", "/etc/app/app.yaml"}, stdout: "port: 80\n"},
		{cmd: []string{"cat", "/var/run/creds/auth/token"}, stdout: "s3cr3t"},
		{cmd: []string{"ls", "/etc/app"}, stdout: "app.yaml\nlevel\n"},
		{cmd: []string{"ls", "/var/run/creds"}, stdout: "auth\n"},
		{cmd: []string{"sh", "-c", "echo $MODE"}, stdout: "prod\n"},
		{cmd: []string{"pg_isready", "-h", "db"}, stdout: "db:5432 - accepting connections\n"},
		{cmd: []string{"migrate"}, stderrSubstr: "boom", code: 3},
		{cmd: []string{"cat", "/etc/passwd"}, stderrSubstr: "No such file", code: 1},
		{cmd: []string{"curl", "example.com"}, stderrSubstr: "curl: command not found", code: 127},
		{cmd: []string{"ls", "/nope"}, stderrSubstr: "cannot access", code: 2},
	} {
		var stdout, stderr bytes.Buffer
		code := shell.run(t.Context(), &pod.Spec.Containers[0], tc.cmd, &stdout, &stderr)
		if code != tc.code || stdout.String() != tc.stdout || !bytes.Contains(stderr.Bytes(), []byte(tc.stderrSubstr)) {
			t.Errorf("%v: exit %d stdout %q stderr %q; want exit %d stdout %q stderr containing %q",
				tc.cmd, code, stdout.String(), stderr.String(), tc.code, tc.stdout, tc.stderrSubstr)
		}
	}
}
