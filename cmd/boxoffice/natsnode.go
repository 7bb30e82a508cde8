package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// runNATSNode runs `boxoffice nats-node` (hidden): one JetStream cluster
// node in this process, from flags, until ctx is done. `boxoffice onsale
// --spawn` starts three of them so the stack needs no nats-server binary.
func runNATSNode(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("nats-node", flag.ContinueOnError)
	name := fs.String("name", "nats-1", "server name, unique in the cluster")
	host := fs.String("host", "127.0.0.1", "address to listen on")
	port := fs.Int("port", 4222, "client port")
	clusterName := fs.String("cluster", "boxoffice-onsale", "cluster name")
	clusterPort := fs.Int("cluster-port", 6222, "cluster (route) port")
	httpPort := fs.Int("http-port", 0, "monitoring port (/healthz); 0 disables it")
	routes := fs.String("routes", "", "comma-separated nats:// routes to the other nodes")
	store := fs.String("store", "", "JetStream store directory (required)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *store == "" {
		return errors.New("-store is required")
	}
	opts := &server.Options{
		ServerName: *name,
		Host:       *host,
		Port:       *port,
		HTTPHost:   *host,
		HTTPPort:   *httpPort,
		JetStream:  true,
		StoreDir:   *store,
		NoSigs:     true,
		Cluster:    server.ClusterOpts{Name: *clusterName, Host: *host, Port: *clusterPort},
	}
	if *routes != "" {
		opts.Routes = server.RoutesFromStr(strings.TrimSpace(*routes))
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		return fmt.Errorf("nats node %s: %w", *name, err)
	}
	srv.ConfigureLogger()
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
