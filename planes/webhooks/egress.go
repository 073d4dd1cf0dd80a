package webhooks

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
)

// EgressPolicyName names the policy in the errors of refused connections.
const EgressPolicyName = "kplane webhook egress policy"

// never are the addresses no plane's webhook may reach, whatever the
// flags say: link-local addresses, where clouds serve instance metadata
// and credentials (169.254.169.254, fd00:ec2::254), and the unspecified
// addresses, which reach the server's own host.
var never = []struct {
	prefix netip.Prefix
	why    string
}{
	{netip.MustParsePrefix("169.254.0.0/16"), "link-local"},
	{netip.MustParsePrefix("fe80::/10"), "link-local"},
	{netip.MustParsePrefix("fd00:ec2::254/128"), "cloud metadata"},
	{netip.MustParsePrefix("0.0.0.0/32"), "unspecified"},
	{netip.MustParsePrefix("::/128"), "unspecified"},
}

// EgressPolicy decides which addresses the server opens connections to
// for the webhooks of a plane, whose admin is not the server's operator.
// By default every address but the never list and the datastore's own
// endpoints is allowed (loopback and private addresses included: the local
// development loop and envtest-style webhooks live there). Deny refuses
// more; a non-empty Allow refuses everything outside it.
type EgressPolicy struct {
	Allow []netip.Prefix
	Deny  []netip.Prefix
	// Datastore are the datastore's endpoints (URLs or host:port): never
	// reachable, so that no plane can talk to the storage of all planes.
	// Host names among them are resolved when a webhook connection is
	// dialed.
	Datastore []string
	// Resolver resolves host names; nil is net.DefaultResolver.
	Resolver *net.Resolver
}

// ParsePrefixes parses CIDRs (or single addresses) of a flag.
func ParsePrefixes(values []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, v := range values {
		v = strings.TrimSpace(v)
		if v == "" {
			continue
		}
		if addr, err := netip.ParseAddr(v); err == nil {
			out = append(out, netip.PrefixFrom(addr.Unmap(), addr.Unmap().BitLen()))
			continue
		}
		prefix, err := netip.ParsePrefix(v)
		if err != nil {
			return nil, fmt.Errorf("%q is neither a CIDR nor an address", v)
		}
		out = append(out, prefix.Masked())
	}
	return out, nil
}

// datastoreAddresses returns the address:port of each datastore endpoint
// that names an IP address or a resolvable host; endpoints without one
// (unix sockets, files) reach no network address and are skipped.
func (p *EgressPolicy) datastoreAddresses(ctx context.Context) []netip.AddrPort {
	var out []netip.AddrPort
	for _, endpoint := range p.Datastore {
		hostPort := endpoint
		if u, err := url.Parse(endpoint); err == nil && u.Host != "" {
			hostPort = u.Host
		}
		host, portText, err := net.SplitHostPort(hostPort)
		if err != nil {
			continue
		}
		port, err := strconv.ParseUint(portText, 10, 16)
		if err != nil {
			continue
		}
		addrs, err := p.lookup(ctx, host)
		if err != nil {
			continue
		}
		for _, addr := range addrs {
			out = append(out, netip.AddrPortFrom(addr.Unmap(), uint16(port)))
		}
	}
	return out
}

func (p *EgressPolicy) lookup(ctx context.Context, host string) ([]netip.Addr, error) {
	if ip, err := netip.ParseAddr(host); err == nil {
		return []netip.Addr{ip}, nil
	}
	resolver := p.Resolver
	if resolver == nil {
		resolver = net.DefaultResolver
	}
	return resolver.LookupNetIP(ctx, "ip", host)
}

// check returns why target may not be reached, or nil.
func (p *EgressPolicy) check(ctx context.Context, target netip.AddrPort) error {
	addr := target.Addr().Unmap()
	refuse := func(why string) error {
		return fmt.Errorf("%s refuses %s: %s", EgressPolicyName, target, why)
	}
	for _, n := range never {
		if n.prefix.Contains(addr) {
			return refuse(n.why + " addresses are never reachable")
		}
	}
	for _, ds := range p.datastoreAddresses(ctx) {
		if ds.Addr() == addr && ds.Port() == target.Port() {
			return refuse("the datastore is never reachable")
		}
		// A datastore listening on every address is reached through any
		// loopback address of the host too.
		if ds.Addr().IsUnspecified() && addr.IsLoopback() && ds.Port() == target.Port() {
			return refuse("the datastore is never reachable")
		}
	}
	for _, d := range p.Deny {
		if d.Contains(addr) {
			return refuse(fmt.Sprintf("denied by %s (--webhook-egress-deny-cidrs)", d))
		}
	}
	if len(p.Allow) == 0 {
		return nil
	}
	for _, a := range p.Allow {
		if a.Contains(addr) {
			return nil
		}
	}
	return refuse("not in --webhook-egress-allow-cidrs")
}

// DialContext resolves addr, checks every address it resolves to, and
// dials the first: the address checked is the address dialed, so a name
// that resolves differently a moment later cannot slip past the policy.
func (p *EgressPolicy) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	host, portText, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", EgressPolicyName, err)
	}
	port, err := strconv.ParseUint(portText, 10, 16)
	if err != nil {
		return nil, fmt.Errorf("%s: port of %s: %w", EgressPolicyName, addr, err)
	}
	addrs, err := p.lookup(ctx, host)
	if err != nil {
		return nil, err
	}
	for _, a := range addrs {
		if err := p.check(ctx, netip.AddrPortFrom(a, uint16(port))); err != nil {
			return nil, err
		}
	}
	var d net.Dialer
	var lastErr error
	for _, a := range addrs {
		conn, err := d.DialContext(ctx, network, netip.AddrPortFrom(a, uint16(port)).String())
		if err == nil {
			return conn, nil
		}
		lastErr = err
	}
	if lastErr == nil {
		lastErr = fmt.Errorf("%s resolves to no address", host)
	}
	return nil, lastErr
}
