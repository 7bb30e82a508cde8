// Command webhook-receiver runs the example receiver of
// examples/webhookreceiver on ADDR (default :9000), verifying with
// WEBHOOK_SECRET and recording in DATABASE_URL (its tables are created if
// missing). Point a webhook endpoint at http://<host>:9000/ and send it a
// test delivery (POST /v1/webhook-endpoints/{endpointId}/test).
package main

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"boxoffice/examples/webhookreceiver"
)

func main() {
	logger := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	if err := run(logger); err != nil {
		logger.Error("webhook-receiver", "error", err.Error())
		os.Exit(1)
	}
}

func run(logger *slog.Logger) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	secret, dbURL := os.Getenv("WEBHOOK_SECRET"), os.Getenv("DATABASE_URL")
	if secret == "" || dbURL == "" {
		return fmt.Errorf("set WEBHOOK_SECRET (whsec_…) and DATABASE_URL")
	}
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		return fmt.Errorf("database: %w", err)
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, webhookreceiver.Schema); err != nil {
		return fmt.Errorf("schema: %w", err)
	}
	rc, err := webhookreceiver.New(secret, pool, logger)
	if err != nil {
		return err
	}
	srv := &http.Server{Addr: cmp.Or(os.Getenv("ADDR"), ":9000"), Handler: rc, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	logger.Info("webhook-receiver listening", "addr", srv.Addr)
	if err := srv.ListenAndServe(); err != nil && err != http.ErrServerClosed {
		return err
	}
	return nil
}
