package webhooks

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
	"time"

	"boxoffice/platform/fault"
)

// ErrRefusedURL is wrapped by every refusal of the SSRF guard: a URL that
// is malformed, not https (unless private delivery is allowed), or whose
// host is or resolves to an address webhooks must never reach.
var ErrRefusedURL = fault.New(fault.CodeInvalid, "webhook url refused")

// refused builds an error wrapping ErrRefusedURL. reason never holds
// secrets: URLs with credentials are refused before they are quoted.
func refused(reason string) error { return fmt.Errorf("%w: %s", ErrRefusedURL, reason) }

// Resolver looks up the addresses of a host name; *net.Resolver is one.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Guard keeps webhook deliveries away from internal networks (SSRF): it
// vets URLs when an endpoint is created or changed, and again on every
// dial, where it resolves the host once, vets every address and dials only
// a vetted one (a DNS answer that changes between the check and the dial
// cannot redirect the connection), and checks the socket's address once
// more just before connect.
//
// Refused unless AllowPrivate: loopback, private (10/8, 172.16/12,
// 192.168/16, fc00::/7), link-local (169.254/16 including the cloud
// metadata address 169.254.169.254, fe80::/10), CGNAT (100.64/10),
// unspecified, multicast, broadcast and reserved ranges, and fd00:ec2::254;
// and every IPv6 form that embeds or translates one of those IPv4
// addresses (IPv4-mapped, IPv4-compatible, IPv4-translated, 6to4, Teredo
// server or client, NAT64 64:ff9b::/96), judged by the IPv4 address inside,
// plus the whole NAT64 local-use prefix 64:ff9b:1::/48.
type Guard struct {
	// AllowPrivate lets webhooks reach every address and use plain http:
	// for development and tests (BOXOFFICE_WEBHOOK_ALLOW_PRIVATE).
	AllowPrivate bool
	// Resolver resolves host names. Defaults to net.DefaultResolver.
	Resolver Resolver
	// controlFunc, set only by tests, sees every socket address the guard
	// lets a connection go to.
	controlFunc func(address string)
}

func (g *Guard) resolver() Resolver {
	if g.Resolver != nil {
		return g.Resolver
	}
	return net.DefaultResolver
}

// maxURLLength bounds an endpoint URL.
const maxURLLength = 2048

// CheckURL parses raw and reports whether webhooks may be sent to it: an
// absolute http(s) URL without credentials or fragment; https unless
// AllowPrivate; a host that is, or resolves only to, allowed addresses.
// Returns an error wrapping ErrRefusedURL when it may not, or the
// resolver's error when the host cannot be resolved.
func (g *Guard) CheckURL(ctx context.Context, raw string) (*url.URL, error) {
	if len(raw) > maxURLLength {
		return nil, refused("longer than 2048 bytes")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, refused("not a valid URL")
	}
	switch {
	case u.User != nil:
		return nil, refused("credentials in the URL are not allowed")
	case u.Scheme != "https" && u.Scheme != "http":
		return nil, refused("scheme must be https")
	case u.Scheme == "http" && !g.AllowPrivate:
		return nil, refused("scheme must be https")
	case u.Host == "" || u.Hostname() == "":
		return nil, refused("host is missing")
	case u.Fragment != "":
		return nil, refused("fragments are not allowed")
	}
	if _, err := g.resolve(ctx, u.Hostname()); err != nil {
		return nil, err
	}
	return u, nil
}

// URLKey is the form of a URL CheckURL accepted in which two spellings of
// one receiver compare equal: scheme and host in lower case, the host
// without a trailing dot, an IP literal in its canonical form (an
// IPv4-mapped address as the IPv4 one), no default port (443 for https, 80
// for http), "/" for an empty path; the path (case-sensitive) and query as
// they were. An organizer has at most one endpoint per key.
func URLKey(u *url.URL) string {
	scheme := strings.ToLower(u.Scheme)
	host := strings.TrimSuffix(strings.ToLower(u.Hostname()), ".")
	if ip, err := netip.ParseAddr(host); err == nil {
		host = ip.Unmap().String()
	}
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	if port := u.Port(); port != "" && !(scheme == "https" && port == "443") && !(scheme == "http" && port == "80") {
		host += ":" + port
	}
	path := u.EscapedPath()
	if path == "" {
		path = "/"
	}
	key := scheme + "://" + host + path
	if u.RawQuery != "" || u.ForceQuery {
		key += "?" + u.RawQuery
	}
	return key
}

// resolve returns the addresses of host, all vetted: an address literal
// is vetted as it is, a name is resolved and refused when any of its
// addresses is refused (a name that mixes public and private addresses is
// an attack or a mistake either way).
func (g *Guard) resolve(ctx context.Context, host string) ([]netip.Addr, error) {
	host = strings.TrimSuffix(strings.TrimPrefix(strings.TrimSuffix(host, "]"), "["), ".")
	if ip, err := netip.ParseAddr(host); err == nil {
		if err := g.vet(ip); err != nil {
			return nil, err
		}
		return []netip.Addr{ip}, nil
	}
	if strings.EqualFold(host, "localhost") || strings.HasSuffix(strings.ToLower(host), ".localhost") {
		if !g.AllowPrivate {
			return nil, refused("localhost is not allowed")
		}
	}
	ips, err := g.resolver().LookupNetIP(ctx, "ip", host)
	if err != nil {
		return nil, fmt.Errorf("resolve webhook host: %w", err)
	}
	if len(ips) == 0 {
		return nil, fmt.Errorf("resolve webhook host: no addresses")
	}
	for _, ip := range ips {
		if err := g.vet(ip); err != nil {
			return nil, err
		}
	}
	return ips, nil
}

// blocked are the ranges besides netip's own predicates that webhooks
// must not reach.
var blocked = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),         // "this network"
	netip.MustParsePrefix("100.64.0.0/10"),     // CGNAT
	netip.MustParsePrefix("192.0.0.0/24"),      // IETF protocol assignments
	netip.MustParsePrefix("198.18.0.0/15"),     // benchmarking
	netip.MustParsePrefix("240.0.0.0/4"),       // reserved, and broadcast
	netip.MustParsePrefix("fd00:ec2::254/128"), // AWS metadata over IPv6
	netip.MustParsePrefix("100::/64"),          // discard-only
}

// Prefixes of IPv6 forms that embed or translate an IPv4 address (see
// embeddedIPv4).
var (
	// ipv4Compatible is ::a.b.c.d (RFC 4291 §2.5.5.1, deprecated but still
	// routed by some stacks); ipv4Translated is ::ffff:0:a.b.c.d (RFC 2765
	// SIIT). Both carry the IPv4 address in the last 32 bits.
	ipv4Compatible = netip.MustParsePrefix("::/96")
	ipv4Translated = netip.MustParsePrefix("::ffff:0:0:0/96")
	// sixToFour is 2002::/16 (RFC 3056): the relay's IPv4 in bits 16-48.
	sixToFour = netip.MustParsePrefix("2002::/16")
	// teredo is 2001:0::/32 (RFC 4380): the server's IPv4 in bits 32-64,
	// the client's, inverted, in the last 32 bits.
	teredo = netip.MustParsePrefix("2001::/32")
	// nat64 is the well-known NAT64 prefix 64:ff9b::/96 (RFC 6052): the
	// IPv4 address in the last 32 bits.
	nat64 = netip.MustParsePrefix("64:ff9b::/96")
	// nat64LocalUse is RFC 8215's local-use prefix 64:ff9b:1::/48, inside
	// which an operator may place a translator at any RFC 6052 prefix
	// length: where the IPv4 address sits cannot be known, so it is
	// refused whole.
	nat64LocalUse = netip.MustParsePrefix("64:ff9b:1::/48")
)

// vet refuses an address webhooks must not reach, unless AllowPrivate.
func (g *Guard) vet(ip netip.Addr) error {
	if g.AllowPrivate {
		return nil
	}
	if reason := forbidden(ip); reason != "" {
		return refused(reason)
	}
	return nil
}

// forbidden says why ip is not a public unicast address, or "". An IPv6
// address that embeds or translates an IPv4 one is judged by that IPv4
// address too (a packet to it may be delivered there), every one of them
// when the form carries two (Teredo).
func forbidden(ip netip.Addr) string {
	ip = ip.WithZone("").Unmap() // IPv4-mapped ::ffff:a.b.c.d is the IPv4 address
	if reason := forbiddenAlone(ip); reason != "" {
		return reason
	}
	if nat64LocalUse.Contains(ip) {
		return "NAT64 local-use prefix " + nat64LocalUse.String()
	}
	form, embedded := embeddedIPv4(ip)
	for _, v4 := range embedded {
		if reason := forbiddenAlone(v4); reason != "" {
			return reason + " " + v4.String() + " embedded in a " + form + " address"
		}
	}
	return ""
}

// embeddedIPv4 returns the IPv4 addresses an IPv6 address embeds, and the
// name of the form, or none.
func embeddedIPv4(ip netip.Addr) (string, []netip.Addr) {
	if !ip.Is6() {
		return "", nil
	}
	b := ip.As16()
	v4 := func(i int) netip.Addr { return netip.AddrFrom4([4]byte{b[i], b[i+1], b[i+2], b[i+3]}) }
	switch {
	case ipv4Compatible.Contains(ip):
		return "IPv4-compatible", []netip.Addr{v4(12)}
	case ipv4Translated.Contains(ip):
		return "IPv4-translated", []netip.Addr{v4(12)}
	case nat64.Contains(ip):
		return "NAT64", []netip.Addr{v4(12)}
	case sixToFour.Contains(ip):
		return "6to4", []netip.Addr{v4(2)}
	case teredo.Contains(ip):
		client := [4]byte{^b[12], ^b[13], ^b[14], ^b[15]}
		return "Teredo", []netip.Addr{v4(4), netip.AddrFrom4(client)}
	}
	return "", nil
}

// forbiddenAlone says why ip itself, whatever it embeds, is not a public
// unicast address, or "".
func forbiddenAlone(ip netip.Addr) string {
	switch {
	case !ip.IsValid():
		return "invalid address"
	case ip.IsUnspecified():
		return "unspecified address"
	case ip.IsLoopback():
		return "loopback address"
	case ip.IsPrivate():
		return "private address"
	case ip.IsLinkLocalUnicast():
		return "link-local address (includes cloud metadata)"
	case ip.IsMulticast(), ip.IsLinkLocalMulticast(), ip.IsInterfaceLocalMulticast():
		return "multicast address"
	}
	for _, p := range blocked {
		if p.Contains(ip) {
			return "reserved address " + p.String()
		}
	}
	return ""
}

// DialContext dials addr (host:port) the guarded way: it resolves host
// once, vets every address, and connects to the vetted addresses in turn
// with a dialer whose Control refuses a socket address that is not
// allowed. Use it as http.Transport.DialContext.
func (g *Guard) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, refused("bad address")
	}
	ips, err := g.resolve(ctx, host)
	if err != nil {
		return nil, err
	}
	d := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second, Control: g.control}
	var firstErr error
	for _, ip := range ips {
		conn, err := d.DialContext(ctx, network, net.JoinHostPort(ip.String(), port))
		if err == nil {
			return conn, nil
		}
		if firstErr == nil {
			firstErr = err
		}
		if ctx.Err() != nil {
			break
		}
	}
	return nil, firstErr
}

// control runs on the socket just before connect: the last word on where
// the connection goes.
func (g *Guard) control(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return refused("unparseable socket address")
	}
	if err := g.vet(ap.Addr()); err != nil {
		return err
	}
	if g.controlFunc != nil {
		g.controlFunc(address)
	}
	return nil
}
