package natstest

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"boxoffice/platform/bus"
)

// Domains of the two regions NewRegions starts.
const (
	PrimaryDomain = "primary"
	StandbyDomain = "standby"
)

// NewRegions starts two JetStream servers as two regions: the primary, in
// JetStream domain PrimaryDomain with cfg's streams provisioned, and the
// standby, in domain StandbyDomain, connected to the primary as a leafnode
// and holding mirrors of them (bus.ProvisionStandby). Both stop when the
// test ends; Stop on the primary is the region's loss.
func NewRegions(tb testing.TB, cfg bus.Config) (primary, standby *Server) {
	tb.Helper()
	leafPort := freePort(tb)
	primary = newDomainServer(tb, PrimaryDomain, func(o *server.Options) {
		o.LeafNode = server.LeafNodeOpts{Host: "127.0.0.1", Port: leafPort}
	})
	standby = newDomainServer(tb, StandbyDomain, func(o *server.Options) {
		u, err := url.Parse(fmt.Sprintf("nats-leaf://127.0.0.1:%d", leafPort))
		require.NoError(tb, err)
		o.LeafNode = server.LeafNodeOpts{
			Remotes: []*server.RemoteLeafOpts{{
				URLs:        []*url.URL{u},
				DenyImports: bus.StandbyLeafDenied(),
				DenyExports: bus.StandbyLeafDenied(),
			}},
			ReconnectInterval: 250 * time.Millisecond,
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, pjs := primary.Connect(tb)
	require.NoError(tb, bus.Provision(ctx, pjs, cfg))
	snc, sjs := standby.Connect(tb)
	// The mirrors are made only once the primary's JetStream answers
	// across the leafnode: a mirror whose first consumer cannot be created
	// is retried by the server after 10 s, then 20 s more, so a leafnode
	// that connected a moment late kept the streams uncopied for half a
	// minute on a loaded machine.
	across, err := jetstream.NewWithDomain(snc, PrimaryDomain)
	require.NoError(tb, err)
	require.Eventually(tb, func() bool {
		actx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		_, err := across.AccountInfo(actx)
		return err == nil
	}, 30*time.Second, 20*time.Millisecond, "the primary's JetStream answers across the leafnode")
	require.NoError(tb, bus.ProvisionStandby(ctx, sjs, cfg, PrimaryDomain))
	return primary, standby
}

func newDomainServer(tb testing.TB, domain string, edit func(*server.Options)) *Server {
	tb.Helper()
	port := freePort(tb)
	s := &Server{
		opts: server.Options{
			ServerName: domain, Host: "127.0.0.1", Port: port, JetStream: true, JetStreamDomain: domain,
			StoreDir: tb.TempDir(), NoSigs: true, NoLog: true, MaxPayload: 8 << 20,
		},
		URL: fmt.Sprintf("nats://127.0.0.1:%d", port),
	}
	edit(&s.opts)
	s.Start(tb)
	tb.Cleanup(s.Stop)
	return s
}

func freePort(tb testing.TB) int {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(tb, err)
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}
