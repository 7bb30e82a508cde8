package webhooks

import (
	"context"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// fakeResolver answers from a map; answers may change between calls (DNS
// rebinding) by giving a list per call.
type fakeResolver struct {
	mu      sync.Mutex
	answers map[string][][]netip.Addr
	calls   map[string]int
}

func newFakeResolver(answers map[string][][]netip.Addr) *fakeResolver {
	return &fakeResolver{answers: answers, calls: map[string]int{}}
}

func (r *fakeResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	seq, ok := r.answers[host]
	if !ok {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	i := min(r.calls[host], len(seq)-1)
	r.calls[host]++
	return seq[i], nil
}

func addrs(s ...string) []netip.Addr {
	out := make([]netip.Addr, len(s))
	for i, a := range s {
		out[i] = netip.MustParseAddr(a)
	}
	return out
}

func TestGuard(t *testing.T) {
	t.Parallel()

	resolver := newFakeResolver(map[string][][]netip.Addr{
		"public.example":   {addrs("93.184.216.34")},
		"internal.example": {addrs("10.1.2.3")},
		"mixed.example":    {addrs("93.184.216.34", "192.168.1.1")},
		"meta.example":     {addrs("169.254.169.254")},
		"v6local.example":  {addrs("fd12:3456::1")},
	})
	strict := &Guard{Resolver: resolver}

	t.Run("RefusesEachForbiddenTarget", func(t *testing.T) {
		t.Parallel()
		for _, u := range []string{
			"https://127.0.0.1/hook",             // loopback
			"https://127.8.9.10/hook",            // loopback /8
			"https://localhost/hook",             // loopback name
			"https://10.0.0.1/hook",              // private 10/8
			"https://172.16.0.1/hook",            // private 172.16/12
			"https://172.31.255.254/hook",        // private 172.16/12, top
			"https://192.168.0.1/hook",           // private 192.168/16
			"https://169.254.10.10/hook",         // link-local
			"https://169.254.169.254/latest",     // cloud metadata
			"https://100.64.0.1/hook",            // CGNAT
			"https://0.0.0.0/hook",               // unspecified
			"https://224.0.0.1/hook",             // multicast
			"https://255.255.255.255/hook",       // broadcast
			"https://[::1]/hook",                 // IPv6 loopback
			"https://[::]/hook",                  // IPv6 unspecified
			"https://[fc00::1]/hook",             // IPv6 unique local fc00::/7
			"https://[fdff:ffff::1]/hook",        // IPv6 unique local, fd half
			"https://[fe80::1]/hook",             // IPv6 link-local
			"https://[fd00:ec2::254]/hook",       // AWS metadata over IPv6
			"https://[::ffff:127.0.0.1]/hook",    // IPv4-mapped loopback
			"https://[::ffff:169.254.169.254]/x", // IPv4-mapped metadata
			"https://[64:ff9b::a00:1]/hook",      // NAT64 of 10.0.0.1
			"https://internal.example/hook",      // a name that resolves to a private address
			"https://mixed.example/hook",         // a name with one private address among public ones
			"https://meta.example/hook",          // a name that resolves to the metadata address
			"https://v6local.example/hook",       // a name that resolves to an IPv6 unique local address
			"http://public.example/hook",         // plain http without allow-private
			"ftp://public.example/hook",          // not http(s)
			"https://user:pass@public.example/",  // credentials
			"/relative",                          // not absolute
			"https://",                           // no host
		} {
			_, err := strict.CheckURL(context.Background(), u)
			require.ErrorIs(t, err, ErrRefusedURL, u)
		}
	})

	t.Run("AllowsPublicHTTPS", func(t *testing.T) {
		t.Parallel()
		for _, u := range []string{"https://public.example/hook?x=1", "https://93.184.216.34:8443/h", "https://[2606:2800:220:1::1]/h"} {
			_, err := strict.CheckURL(context.Background(), u)
			require.NoError(t, err, u)
		}
	})

	t.Run("AllowPrivateAllowsLoopbackAndHTTP", func(t *testing.T) {
		t.Parallel()
		g := &Guard{AllowPrivate: true, Resolver: resolver}
		for _, u := range []string{"http://127.0.0.1:8080/hook", "http://internal.example/x", "https://[::1]/x"} {
			_, err := g.CheckURL(context.Background(), u)
			require.NoError(t, err, u)
		}
	})

	t.Run("UnresolvableHostIsNotARefusal", func(t *testing.T) {
		t.Parallel()
		_, err := strict.CheckURL(context.Background(), "https://nowhere.example/")
		require.Error(t, err)
		require.NotErrorIs(t, err, ErrRefusedURL)
	})

	t.Run("DialRefusesAPrivateAnswerEvenAfterAPublicOne", func(t *testing.T) {
		t.Parallel()
		// DNS rebinding: the name is public when the endpoint is saved and
		// loopback when the dispatcher dials.
		rc := newReceiver(t, status(http.StatusOK))
		_, port, err := net.SplitHostPort(rc.Listener.Addr().String())
		require.NoError(t, err)
		g := &Guard{Resolver: newFakeResolver(map[string][][]netip.Addr{
			"rebind.example": {addrs("93.184.216.34"), addrs("127.0.0.1")},
		})}
		_, err = g.CheckURL(context.Background(), "https://rebind.example:"+port+"/hook")
		require.NoError(t, err, "vetted as public when saved")
		_, err = g.DialContext(context.Background(), "tcp", "rebind.example:"+port)
		require.ErrorIs(t, err, ErrRefusedURL, "refused when it turns private")
		require.Empty(t, rc.requests())
	})

	t.Run("DialsTheVettedAddressAndResolvesOnce", func(t *testing.T) {
		t.Parallel()
		rc := newReceiver(t, status(http.StatusOK))
		_, port, err := net.SplitHostPort(rc.Listener.Addr().String())
		require.NoError(t, err)
		res := newFakeResolver(map[string][][]netip.Addr{"vetted.example": {addrs("127.0.0.1")}})
		var dialed []string
		var mu sync.Mutex
		g := &Guard{AllowPrivate: true, Resolver: res, controlFunc: func(a string) {
			mu.Lock()
			defer mu.Unlock()
			dialed = append(dialed, a)
		}}
		conn, err := g.DialContext(context.Background(), "tcp", "vetted.example:"+port)
		require.NoError(t, err)
		require.NoError(t, conn.Close())
		require.Equal(t, []string{"127.0.0.1:" + port}, dialed, "the socket connects to the vetted IP literal")
		require.Equal(t, 1, res.calls["vetted.example"], "one lookup: the dial does not resolve again")
	})

	t.Run("ControlRefusesAForbiddenSocketAddress", func(t *testing.T) {
		t.Parallel()
		require.ErrorIs(t, strict.control("tcp4", "127.0.0.1:80", nil), ErrRefusedURL)
		require.ErrorIs(t, strict.control("tcp6", "[fe80::1]:443", nil), ErrRefusedURL)
		require.NoError(t, strict.control("tcp4", "93.184.216.34:443", nil))
	})
}

func TestDispatcherSSRF(t *testing.T) {
	t.Parallel()

	t.Run("RebindingToLoopbackIsRefusedAtDialTime", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		org := uuid.New()
		rc := newReceiver(t, status(http.StatusOK))
		u, err := url.Parse(rc.URL)
		require.NoError(t, err)
		res := newFakeResolver(map[string][][]netip.Addr{"rebind.example": {addrs("93.184.216.34"), addrs("127.0.0.1")}})
		// The endpoint is saved while the name is public; by the time the
		// dispatcher dials, it resolves to the loopback receiver.
		b.svc.guard = &Guard{AllowPrivate: false, Resolver: res}
		e, err := b.svc.Create(context.Background(), org, EndpointParams{URL: "https://rebind.example:" + u.Port() + "/hook"})
		require.NoError(t, err)
		b.remember(e.Secret)
		msg := b.message(t, org, EventOrderPaid)
		cfg := b.dispatcherConfig()
		cfg.Guard = &Guard{Resolver: res}
		b.run(t, cfg, nil)

		waitFor(t, 5*time.Second, "dead", func() bool { return b.delivery(t, msg).Status == StatusDead })
		a := b.attempts(t, org, msg)
		require.Len(t, a, 1)
		require.Equal(t, ClassRefused, a[0].ErrorClass)
		require.Empty(t, rc.requests(), "nothing reached the loopback receiver")
	})

	t.Run("RedirectIsNotFollowed", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		org := uuid.New()
		target := newReceiver(t, status(http.StatusOK))
		redirector := newReceiver(t, func(_ int, w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, target.URL+"/stolen", http.StatusTemporaryRedirect)
		})
		b.endpoint(t, org, redirector.URL, EndpointParams{})
		msg := b.message(t, org, EventOrderPaid)
		b.run(t, b.dispatcherConfig(), nil)

		waitFor(t, 5*time.Second, "needs review", func() bool { return b.delivery(t, msg).Status == StatusNeedsReview })
		require.Len(t, redirector.requests(), 1)
		require.Empty(t, target.requests(), "the redirect was not followed")
		a := b.attempts(t, org, msg)
		require.Equal(t, ClassRedirect, a[0].ErrorClass)
		require.Equal(t, int32(307), *a[0].StatusCode)
	})

	t.Run("OversizedPayloadIsNeverSent", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		org := uuid.New()
		rc := newReceiver(t, status(http.StatusOK))
		b.endpoint(t, org, rc.URL, EndpointParams{})
		msg := b.message(t, org, EventOrderPaid)
		cfg := b.dispatcherConfig()
		cfg.MaxPayloadBytes = 16
		b.run(t, cfg, nil)
		waitFor(t, 5*time.Second, "dead", func() bool { return b.delivery(t, msg).Status == StatusDead })
		require.Empty(t, rc.requests())
		require.Equal(t, ClassPayloadTooLarge, b.attempts(t, org, msg)[0].ErrorClass)
	})
}

// Every IPv6 form that embeds or translates an IPv4 address is judged by
// the IPv4 address inside it, wherever the guard looks: the URL when an
// endpoint is saved, a name's DNS answer, and the socket address at dial
// time. The public counterpart of each form stays allowed, except the
// NAT64 local-use prefix, which is refused whole.
func TestGuardEmbeddedIPv4(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		addr    string
		refused bool
	}{
		{"MappedLoopback", "::ffff:127.0.0.1", true},
		{"MappedMetadata", "::ffff:169.254.169.254", true},
		{"MappedPublic", "::ffff:93.184.216.34", false},
		{"CompatibleLoopbackDotted", "::127.0.0.1", true},
		{"CompatibleLoopbackHex", "::7f00:1", true},
		{"CompatiblePrivate", "::10.0.0.1", true},
		{"CompatibleMetadata", "::a9fe:a9fe", true},
		{"CompatibleCGNAT", "::100.64.0.1", true},
		{"CompatiblePublic", "::93.184.216.34", false},
		{"TranslatedLoopback", "::ffff:0:127.0.0.1", true},
		{"TranslatedPrivate", "::ffff:0:192.168.1.1", true},
		{"TranslatedPublic", "::ffff:0:93.184.216.34", false},
		{"SixToFourLoopback", "2002:7f00:1::", true},
		{"SixToFourPrivate", "2002:c0a8:101::1", true},
		{"SixToFourMetadata", "2002:a9fe:a9fe::1", true},
		{"SixToFourPublic", "2002:5db8:d822::1", false},
		// Teredo: 2001:0::/32, the server's IPv4 in bits 32-64, the
		// client's inverted in the last 32 bits.
		{"TeredoClientLoopback", "2001:0:4136:e378:8000:63bf:80ff:fffe", true},
		{"TeredoClientPrivate", "2001:0:4136:e378:8000:63bf:f5ff:fffe", true},
		{"TeredoServerPrivate", "2001:0:a00:1:8000:63bf:a247:27dd", true},
		{"TeredoServerLoopback", "2001:0:7f00:1:8000:63bf:a247:27dd", true},
		{"TeredoPublic", "2001:0:4136:e378:8000:63bf:a247:27dd", false},
		{"NAT64Loopback", "64:ff9b::7f00:1", true},
		{"NAT64Private", "64:ff9b::10.0.0.1", true},
		{"NAT64Metadata", "64:ff9b::169.254.169.254", true},
		{"NAT64Public", "64:ff9b::93.184.216.34", false},
		{"NAT64LocalUseLoopback", "64:ff9b:1::7f00:1", true},
		{"NAT64LocalUse48Layout", "64:ff9b:1:7f00:0:100::", true},
		{"NAT64LocalUsePublicIsRefusedToo", "64:ff9b:1::5db8:d822", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			strict := &Guard{Resolver: newFakeResolver(map[string][][]netip.Addr{"aaaa.example": {addrs(tc.addr)}})}
			check := func(err error, where string) {
				t.Helper()
				if tc.refused {
					require.ErrorIs(t, err, ErrRefusedURL, "%s: %s", where, tc.addr)
				} else {
					require.NoError(t, err, "%s: %s", where, tc.addr)
				}
			}
			_, err := strict.CheckURL(t.Context(), "https://["+tc.addr+"]/hook")
			check(err, "address in the URL")
			_, err = strict.CheckURL(t.Context(), "https://aaaa.example/hook")
			check(err, "name whose AAAA answer it is")
			check(strict.control("tcp6", netip.AddrPortFrom(netip.MustParseAddr(tc.addr), 443).String(), nil), "socket address at dial time")
			if tc.refused {
				_, err = strict.DialContext(t.Context(), "tcp", "aaaa.example:443")
				check(err, "dial of the name")
			}
		})
	}
}
