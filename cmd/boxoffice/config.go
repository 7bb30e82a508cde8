package main

import (
	"cmp"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"time"

	"boxoffice/bus"
)

// config is the process configuration, read once from the environment.
type config struct {
	DatabaseURL  string
	DBMaxConns   int32
	HTTPAddr     string
	JWTSecret    []byte
	AdmissionKey []byte
	HoldTTL      time.Duration
	Cell         string
	LogLevel     slog.Level
	NATSURL      string
	Streams      bus.Config
	OpsAddr      string
	// StripeWebhookSecret verifies provider webhooks; unset, the API has
	// no webhook route.
	StripeWebhookSecret string
}

// configError names the variable that stops start-up.
type configError struct{ name, problem string }

func (e *configError) Error() string { return e.name + ": " + e.problem }

// loadConfig reads the environment. required lists the variables this role
// cannot run without; dev fills some with defaults before calling.
func loadConfig(getenv func(string) string, required ...string) (config, error) {
	c := config{
		DatabaseURL:  getenv("DATABASE_URL"),
		HTTPAddr:     cmp.Or(getenv("HTTP_ADDR"), ":8080"),
		JWTSecret:    []byte(getenv("BOXOFFICE_JWT_SECRET")),
		AdmissionKey: []byte(getenv("BOXOFFICE_ADMISSION_KEY")),
		Cell:         cmp.Or(getenv("BOXOFFICE_CELL"), "default"),
		NATSURL:      getenv("NATS_URL"),
		OpsAddr:      cmp.Or(getenv("OPS_ADDR"), ":9090"),

		StripeWebhookSecret: getenv("STRIPE_WEBHOOK_SECRET"),
	}
	for _, name := range required {
		if getenv(name) == "" {
			return c, &configError{name, "is required but not set"}
		}
	}
	for name, v := range map[string][]byte{"BOXOFFICE_JWT_SECRET": c.JWTSecret, "BOXOFFICE_ADMISSION_KEY": c.AdmissionKey} {
		if len(v) > 0 && len(v) < 32 {
			return c, &configError{name, "must be at least 32 bytes"}
		}
	}
	maxConns, err := strconv.Atoi(cmp.Or(getenv("DATABASE_MAX_CONNS"), "16"))
	if err != nil || maxConns < 1 {
		return c, &configError{"DATABASE_MAX_CONNS", "must be a positive number"}
	}
	c.DBMaxConns = int32(maxConns)
	if c.HoldTTL, err = time.ParseDuration(cmp.Or(getenv("BOXOFFICE_HOLD_TTL"), "5m")); err != nil || c.HoldTTL <= 0 {
		return c, &configError{"BOXOFFICE_HOLD_TTL", "must be a positive duration such as 5m"}
	}
	replicas, err := strconv.Atoi(cmp.Or(getenv("BOXOFFICE_STREAM_REPLICAS"), "1"))
	if err != nil || replicas < 1 || replicas > 5 {
		return c, &configError{"BOXOFFICE_STREAM_REPLICAS", "must be a number from 1 to 5"}
	}
	c.Streams.Replicas = replicas
	if err := c.LogLevel.UnmarshalText([]byte(cmp.Or(getenv("BOXOFFICE_LOG_LEVEL"), "info"))); err != nil {
		return c, &configError{"BOXOFFICE_LOG_LEVEL", "must be debug, info, warn or error"}
	}
	return c, nil
}

func newLogger(level slog.Level) *slog.Logger {
	return slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
}

func fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "boxoffice: "+format+"\n", args...)
	os.Exit(1)
}
