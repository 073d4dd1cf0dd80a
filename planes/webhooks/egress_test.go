package webhooks

import (
	"context"
	"net/netip"
	"strings"
	"testing"
)

func TestEgressPolicy(t *testing.T) {
	deny, err := ParsePrefixes([]string{"10.0.0.0/8", " 192.0.2.7 "})
	if err != nil {
		t.Fatal(err)
	}
	open := &EgressPolicy{Deny: deny, Datastore: []string{"http://127.0.0.1:2379", "unix:///run/kine.sock", "postgres://u:p@10.9.9.9:5432/db"}}
	allowOnly := &EgressPolicy{Allow: []netip.Prefix{netip.MustParsePrefix("172.16.0.0/12")}}
	for _, tc := range []struct {
		policy *EgressPolicy
		target string
		refuse string // "" when allowed
	}{
		{open, "127.0.0.1:9443", ""},
		{open, "[::1]:9443", ""},
		{open, "192.168.1.5:443", ""},
		{open, "203.0.113.9:443", ""},
		{open, "169.254.169.254:80", "link-local"},
		{open, "[::ffff:169.254.169.254]:80", "link-local"},
		{open, "[fe80::1]:443", "link-local"},
		{open, "[fd00:ec2::254]:80", "cloud metadata"},
		{open, "0.0.0.0:443", "unspecified"},
		{open, "127.0.0.1:2379", "the datastore"},
		{open, "10.1.2.3:443", "denied by 10.0.0.0/8 (--webhook-egress-deny-cidrs)"},
		{open, "192.0.2.7:443", "denied by 192.0.2.7/32"},
		{allowOnly, "172.20.0.1:443", ""},
		{allowOnly, "127.0.0.1:443", "not in --webhook-egress-allow-cidrs"},
		{allowOnly, "169.254.169.254:80", "link-local"},
	} {
		err := tc.policy.check(context.Background(), netip.MustParseAddrPort(tc.target))
		switch {
		case tc.refuse == "" && err != nil:
			t.Errorf("%s: refused: %v", tc.target, err)
		case tc.refuse != "" && (err == nil || !strings.Contains(err.Error(), tc.refuse) || !strings.Contains(err.Error(), EgressPolicyName)):
			t.Errorf("%s: got %v, want a refusal of the policy with %q", tc.target, err, tc.refuse)
		}
	}
}

func TestDialRefusesBeforeConnecting(t *testing.T) {
	p := &EgressPolicy{}
	_, err := p.DialContext(context.Background(), "tcp", "169.254.169.254:80")
	if err == nil || !strings.Contains(err.Error(), "link-local") {
		t.Fatalf("got %v, want a refusal", err)
	}
}

func TestParsePrefixesRefusesGarbage(t *testing.T) {
	if _, err := ParsePrefixes([]string{"10.0.0.0/33"}); err == nil {
		t.Fatal("10.0.0.0/33 accepted")
	}
}
