package server

import (
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

// run parses args (after the command name) into fresh options.
func run(t *testing.T, args ...string) *Options {
	t.Helper()
	o := NewOptions()
	app := &cli.App{Commands: []*cli.Command{{Name: "server", Flags: o.Flags(), Action: func(*cli.Context) error { return nil }}}}
	if err := app.Run(append([]string{"kplane", "server"}, args...)); err != nil {
		t.Fatal(err)
	}
	return o
}

func TestFlagsBindOptions(t *testing.T) {
	o := run(t, "--tls-san", "a.example", "--tls-san", "10.0.0.1", "--log-level", "debug", "--v", "3",
		"--max-planes", "7", "--etcd-compaction-interval", "1m")
	if !reflect.DeepEqual(o.TLSSANs, []string{"a.example", "10.0.0.1"}) {
		t.Errorf("TLSSANs = %q", o.TLSSANs)
	}
	if o.LogLevel != "debug" || o.Verbosity != 3 || o.MaxPlanes != 7 || o.CompactionInterval.String() != "1m0s" {
		t.Errorf("options = %+v", o)
	}

	t.Setenv("KPLANE_TLS_SAN", "x.example,y.example")
	t.Setenv("KPLANE_LOG_LEVEL", "warn")
	o = run(t)
	if !reflect.DeepEqual(o.TLSSANs, []string{"x.example", "y.example"}) || o.LogLevel != "warn" {
		t.Errorf("from the environment: TLSSANs %q, log level %q", o.TLSSANs, o.LogLevel)
	}
}

func TestFlagsDefaults(t *testing.T) {
	o := run(t)
	want := NewOptions()
	if !reflect.DeepEqual(o, want) {
		t.Errorf("parsing no flags changed the defaults:\n got %+v\nwant %+v", o, want)
	}
}

// Every flag can be set from a KPLANE_* environment variable (the systemd
// unit and the container image configure the server that way).
func TestFlagsHaveEnvVars(t *testing.T) {
	for _, f := range NewOptions().Flags() {
		env := f.(cli.DocGenerationFlag).GetEnvVars()
		want := "KPLANE_" + strings.ToUpper(strings.ReplaceAll(f.Names()[0], "-", "_"))
		if len(env) == 0 || env[0] != want {
			t.Errorf("--%s: env vars %q, want %s first", f.Names()[0], env, want)
		}
	}
}

// --profile takes full or generic, from the flag or KPLANE_PROFILE;
// anything else stops start-up with a message naming both.
func TestFlagsProfile(t *testing.T) {
	if o := run(t, "--profile", "generic"); o.Profile != "generic" || o.Validate() != nil {
		t.Errorf("--profile generic: %q, %v", o.Profile, o.Validate())
	}
	t.Setenv("KPLANE_PROFILE", "generic")
	if o := run(t); o.Profile != "generic" {
		t.Errorf("KPLANE_PROFILE=generic: %q", o.Profile)
	}
	o := run(t, "--profile", "workloads")
	if err := o.Validate(); err == nil || !strings.Contains(err.Error(), "want full or generic") {
		t.Errorf("--profile workloads: %v", err)
	}
}

// Bad audit flags stop the server before it starts, naming the flag.
func TestAuditFlagsValidated(t *testing.T) {
	if err := run(t, "--audit-buffer-events", "50", "--audit-level", "RequestResponse").Validate(); err != nil {
		t.Fatalf("good audit flags: %v", err)
	}
	for _, args := range [][]string{
		{"--audit-level", "Everything"}, {"--audit-buffer-events", "-1"}, {"--audit-max-file-size", "0"},
	} {
		err := run(t, args...).Validate()
		if err == nil || !strings.Contains(err.Error(), args[0]) {
			t.Errorf("%s %s: %v, want an error naming the flag", args[0], args[1], err)
		}
	}
}

// --join-token (alias --token, KPLANE_JOIN_TOKEN) or --join-token-file,
// only on a datastore other servers can share.
func TestJoinTokenOptions(t *testing.T) {
	const etcd = "http://127.0.0.1:2379"
	token := strings.Repeat("t", 16)
	for _, c := range []struct {
		args []string
		err  string
	}{
		{[]string{"--join-token", token, "--datastore-endpoint", etcd}, ""},
		{[]string{"--token", token, "--datastore-endpoint", "postgres://u@db/kplane"}, ""},
		{[]string{"--join-token", token}, "needs a datastore several servers share"},
		{[]string{"--join-token", token, "--datastore-endpoint", "etcd"}, "needs --cluster-init (the first server) or --server"},
		{[]string{"--join-token", "short", "--datastore-endpoint", etcd}, "at least 16 characters"},
		{[]string{"--join-token", token, "--join-token-file", "/x", "--datastore-endpoint", etcd}, "give one"},
	} {
		o := run(t, c.args...)
		err := o.Validate()
		if (c.err == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.err)) {
			t.Errorf("%q: %v, want %q", c.args, err, c.err)
		}
	}

	file := t.TempDir() + "/token"
	if err := os.WriteFile(file, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("KPLANE_JOIN_TOKEN_FILE", file)
	o := run(t, "--datastore-endpoint", etcd)
	cfg, err := o.Config()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.JoinToken != token {
		t.Fatalf("token from KPLANE_JOIN_TOKEN_FILE: %q", cfg.JoinToken)
	}
}

// --cluster-init and --server: an embedded etcd cluster, with a join
// token, one of the two, a peer address the others can reach.
func TestEmbeddedClusterOptions(t *testing.T) {
	token := strings.Repeat("t", 16)
	for _, c := range []struct {
		args []string
		err  string
	}{
		{[]string{"--datastore-endpoint", "etcd", "--join-token", token, "--cluster-init"}, ""},
		{[]string{"--datastore-endpoint", "etcd", "--join-token", token, "--server", "https://10.0.0.1:6443", "--etcd-peer-port", "2381"}, ""},
		{[]string{"--datastore-endpoint", "etcd", "--join-token", token, "--cluster-init", "--bind-address", "0.0.0.0", "--etcd-advertise-address", "10.0.0.1"}, ""},
		{[]string{"--datastore-endpoint", "etcd", "--cluster-init"}, "needs a --join-token"},
		{[]string{"--cluster-init"}, "need --datastore-endpoint etcd"},
		{[]string{"--join-token", token, "--cluster-init"}, "etcd with --cluster-init or --server"},
		{[]string{"--datastore-endpoint", "etcd", "--join-token", token, "--cluster-init", "--server", "https://a:6443"}, "give one"},
		{[]string{"--datastore-endpoint", "etcd", "--join-token", token, "--server", "http://a:6443"}, "want https://host:port"},
		{[]string{"--datastore-endpoint", "etcd", "--join-token", token, "--cluster-init", "--etcd-peer-port", "0"}, "out of range"},
		{[]string{"--datastore-endpoint", "etcd", "--join-token", token, "--cluster-init", "--bind-address", "0.0.0.0"}, "--etcd-advertise-address is needed"},
	} {
		err := run(t, c.args...).Validate()
		if (c.err == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.err)) {
			t.Errorf("%q: %v, want %q", c.args, err, c.err)
		}
	}
}
