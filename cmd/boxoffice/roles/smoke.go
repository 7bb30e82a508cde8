package roles

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"boxoffice/ops/smoke"
)

// runSmoke runs `boxoffice smoke`: one synthetic purchase (hold, sandbox
// payment, ticket) and one test webhook through the API at -api; exit 0
// when both went through, else 1 with the step that failed and why.
// Tokens are signed with BOXOFFICE_JWT_SECRET, which the API must accept.
func runSmoke(ctx context.Context, args []string, getenv func(string) string, out io.Writer) error {
	fs := flag.NewFlagSet("smoke", flag.ContinueOnError)
	api := fs.String("api", "http://127.0.0.1:8080", "the API base URL")
	listen := fs.String("webhook-listen", "127.0.0.1:0", "where to receive the test webhook")
	hookURL := fs.String("webhook-url", "", "the URL the workers reach the listener at (default: http://<listen address>/smoke)")
	timeout := fs.Duration("timeout", 2*time.Minute, "give up after this long")
	if err := ParseFlags(fs, args); err != nil {
		return err
	}
	secret := getenv("BOXOFFICE_JWT_SECRET")
	if secret == "" {
		return errors.New("BOXOFFICE_JWT_SECRET is required: smoke signs its organizer's and buyer's tokens with it")
	}
	res, err := smoke.Run(ctx, smoke.Config{
		API: *api, JWTSecret: []byte(secret), WebhookListen: *listen, WebhookURL: *hookURL, Timeout: *timeout, Log: out,
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "smoke passed: order %s ticketed %s after its hold, test webhook received, %s in all\n",
		res.OrderID, res.Ticketed.Sub(res.Held).Round(time.Millisecond), res.Webhook.Sub(res.Started).Round(time.Millisecond))
	return nil
}
