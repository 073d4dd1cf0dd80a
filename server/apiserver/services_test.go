package apiserver

import (
	"net"
	"testing"
)

func TestFirstServiceIP(t *testing.T) {
	for cidr, want := range map[string]string{
		"10.96.0.0/16":  "10.96.0.1",
		"10.0.0.0/24":   "10.0.0.1",
		"fd00:10::/108": "fd00:10::1",
	} {
		_, ipNet, err := net.ParseCIDR(cidr)
		if err != nil {
			t.Fatal(err)
		}
		got, err := firstServiceIP(*ipNet)
		if err != nil || got.String() != want {
			t.Errorf("%s: got %v, %v; want %s", cidr, got, err, want)
		}
	}
	_, single, _ := net.ParseCIDR("10.0.0.7/32")
	if ip, err := firstServiceIP(*single); err == nil {
		t.Errorf("a /32 has no first service address, got %v", ip)
	}
}
