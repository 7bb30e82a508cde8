package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"boxoffice/platform/bus"
)

// runNATSNode runs `boxoffice nats-node` (hidden): one JetStream cluster
// node in this process, from flags, until ctx is done. `boxoffice-lab simulate
// --spawn` starts three of them so the stack needs no nats-server binary.
func runNATSNode(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("nats-node", flag.ContinueOnError)
	name := fs.String("name", "nats-1", "server name, unique in the cluster")
	host := fs.String("host", "127.0.0.1", "address to listen on")
	port := fs.Int("port", 4222, "client port")
	clusterName := fs.String("cluster", "boxoffice-onsale", "cluster name")
	clusterPort := fs.Int("cluster-port", 6222, "cluster (route) port; 0: a single node, no cluster")
	httpPort := fs.Int("http-port", 0, "monitoring port (/healthz); 0 disables it")
	routes := fs.String("routes", "", "comma-separated nats:// routes to the other nodes")
	store := fs.String("store", "", "JetStream store directory (required)")
	domain := fs.String("domain", "", "JetStream domain (a region of its own, for boxoffice-lab gameday)")
	leafPort := fs.Int("leaf-port", 0, "accept leafnode connections on this port; 0: none")
	leafRemote := fs.String("leaf-remote", "", "nats-leaf:// URL of the region this node's standby streams mirror; the link carries no event subjects (bus.StandbyLeafDenied)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *store == "" {
		return errors.New("-store is required")
	}
	opts := &server.Options{
		ServerName:      *name,
		Host:            *host,
		Port:            *port,
		HTTPHost:        *host,
		HTTPPort:        *httpPort,
		JetStream:       true,
		StoreDir:        *store,
		NoSigs:          true,
		JetStreamDomain: *domain,
	}
	if *clusterPort != 0 {
		opts.Cluster = server.ClusterOpts{Name: *clusterName, Host: *host, Port: *clusterPort}
	}
	if *leafPort != 0 {
		opts.LeafNode.Host, opts.LeafNode.Port = *host, *leafPort
	}
	if *leafRemote != "" {
		u, err := url.Parse(*leafRemote)
		if err != nil {
			return fmt.Errorf("-leaf-remote: %w", err)
		}
		opts.LeafNode.Remotes = []*server.RemoteLeafOpts{{
			URLs: []*url.URL{u}, DenyImports: bus.StandbyLeafDenied(), DenyExports: bus.StandbyLeafDenied(),
		}}
		opts.LeafNode.ReconnectInterval = 250 * time.Millisecond
	}
	if *routes != "" {
		opts.Routes = server.RoutesFromStr(strings.TrimSpace(*routes))
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		return fmt.Errorf("nats node %s: %w", *name, err)
	}
	logger := slog.New(slog.NewJSONHandler(os.Stderr, nil)).With("component", "nats", "server_name", *name)
	srv.SetLoggerV2(natsLogger{logger}, false, false, false)
	srv.Start()
	if !srv.ReadyForConnections(30 * time.Second) {
		srv.Shutdown()
		return fmt.Errorf("nats node %s: not ready after 30s", *name)
	}
	<-ctx.Done()
	srv.Shutdown()
	srv.WaitForShutdown()
	return nil
}

// natsLogger writes the embedded server's log as slog JSON lines, like
// every other role's. Fatalf ends the process, as nats-server's own
// logger does: the server calls it when it cannot listen on a port or
// start JetStream, and a node left running without them would only be
// found unready a minute later.
type natsLogger struct{ l *slog.Logger }

func (n natsLogger) Noticef(format string, v ...any) { n.l.Info(fmt.Sprintf(format, v...)) }
func (n natsLogger) Warnf(format string, v ...any)   { n.l.Warn(fmt.Sprintf(format, v...)) }
func (n natsLogger) Fatalf(format string, v ...any) {
	n.l.Error(fmt.Sprintf(format, v...), "fatal", true)
	os.Exit(1)
}
func (n natsLogger) Errorf(format string, v ...any) { n.l.Error(fmt.Sprintf(format, v...)) }
func (n natsLogger) Debugf(format string, v ...any) { n.l.Debug(fmt.Sprintf(format, v...)) }
func (n natsLogger) Tracef(format string, v ...any) { n.l.Debug(fmt.Sprintf(format, v...)) }
