package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"kplane.dev/kplane/test/e2e/framework"
)

// scripts/kplane.service passes `systemd-analyze verify`. Verify checks
// that ExecStart exists, so the unit is verified with the binary under test
// in place of /usr/local/bin/kplane, the one change install.sh makes for
// an install there.
func TestSystemdUnitVerifies(t *testing.T) {
	analyze := framework.RequireCommand(t, "systemd-analyze", "apt-get install systemd; .ci/run installs it")
	bin, err := framework.Binary()
	if err != nil {
		t.Fatal(err)
	}
	if bin, err = filepath.Abs(bin); err != nil {
		t.Fatal(err)
	}
	unit, err := os.ReadFile(repoFile(t, "scripts/kplane.service"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(unit), "ExecStart=/usr/local/bin/kplane server") {
		t.Fatalf("the unit does not start /usr/local/bin/kplane server:\n%s", unit)
	}
	path := filepath.Join(t.TempDir(), "kplane.service")
	writeFile(t, path, strings.ReplaceAll(string(unit), "/usr/local/bin/kplane", bin))
	if out, err := exec.Command(analyze, "verify", path).CombinedOutput(); err != nil {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
}

// install.sh --systemd end to end on a machine where systemd does not run
// (the test's prefix stands for /): unit and env file written, the unit
// verifies, and systemctl is called (daemon-reload, enable --now) only when
// systemd runs. A systemctl placed first on PATH records its calls.
func TestInstallScriptSystemdWithoutSystemd(t *testing.T) {
	analyze := framework.RequireCommand(t, "systemd-analyze", "apt-get install systemd; .ci/run installs it")
	bin, err := framework.Binary()
	if err != nil {
		t.Fatal(err)
	}
	prefix := t.TempDir()
	fakeBin := t.TempDir()
	calls := filepath.Join(t.TempDir(), "systemctl.calls")
	writeFile(t, filepath.Join(fakeBin, "systemctl"), "#!/bin/sh\necho \"$*\" >> "+calls+"\n")
	if err := os.Chmod(filepath.Join(fakeBin, "systemctl"), 0o755); err != nil {
		t.Fatal(err)
	}
	env := installEnv(prefix, "KPLANE_BINARY="+bin, "KPLANE_SKIP_ENABLE=false", "PATH="+fakeBin+":"+os.Getenv("PATH"))
	out, err := runInstall(t, env, "--systemd")
	if err != nil {
		t.Fatalf("install.sh --systemd: %v\n%s", err, out)
	}
	unit := filepath.Join(prefix, "etc/systemd/system/kplane.service")
	if out, err := exec.Command(analyze, "verify", unit).CombinedOutput(); err != nil {
		t.Fatalf("systemd-analyze verify of the installed unit: %v\n%s", err, out)
	}
	envFile := filepath.Join(prefix, "etc/kplane/kplane.env")
	info, err := os.Stat(envFile)
	if err != nil {
		t.Fatal(err)
	}
	if info.Mode().Perm() != 0o600 {
		t.Errorf("env file mode %v, want 0600 (it may hold a token)", info.Mode().Perm())
	}
	recorded, _ := os.ReadFile(calls)
	_, statErr := os.Stat("/run/systemd/system")
	systemdRuns := statErr == nil
	if systemdRuns {
		if !strings.Contains(string(recorded), "daemon-reload") || !strings.Contains(string(recorded), "enable --now kplane.service") {
			t.Errorf("systemd runs here, but install.sh called systemctl with %q", recorded)
		}
	} else {
		if len(recorded) != 0 {
			t.Errorf("systemd does not run here, yet install.sh called systemctl: %q", recorded)
		}
		if !strings.Contains(out, "not starting the service") {
			t.Errorf("install.sh does not say it left the service unstarted:\n%s", out)
		}
	}
	if out, err := runInstall(t, env, "--uninstall", "--purge"); err != nil {
		t.Fatalf("--uninstall --purge: %v\n%s", err, out)
	}
}
