package framework

import (
	"strings"
	"testing"
)

func TestDistinctProblems(t *testing.T) {
	log := strings.Join([]string{
		`time="t1" level=info msg="Serving securely"`,
		`time="t2" level=error msg="Unable to authenticate the request" error="invalid bearer token"`,
		`time="t3" level=warning msg="lost the lease \"kplane-controllers\""`,
		`time="t4" level=error msg="Unable to authenticate the request" error="invalid bearer token"`,
		`time="t5" level=error msg="Unable to authenticate the request" error="invalid bearer token"`,
	}, "\n")
	got := DistinctProblems(log, 10000)
	want := `time="t2" level=error msg="Unable to authenticate the request" error="invalid bearer token" (3 times)` + "\n" +
		`time="t3" level=warning msg="lost the lease \"kplane-controllers\""` + "\n"
	if got != want {
		t.Errorf("DistinctProblems:\n%s\nwant:\n%s", got, want)
	}
	if got := DistinctProblems(log, 130); !strings.HasSuffix(got, "... (1 more distinct messages)\n") {
		t.Errorf("limited to 130 bytes: %q", got)
	}
}
