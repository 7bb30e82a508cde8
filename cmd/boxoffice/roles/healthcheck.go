package roles

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"time"
)

// runHealthcheck runs `boxoffice healthcheck URL`: GET URL and fail unless
// it answers 2xx within 3 seconds. Container healthchecks use it, since
// the image has no shell and no curl.
func runHealthcheck(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("healthcheck", flag.ContinueOnError)
	if err := ParseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return fmt.Errorf("usage: boxoffice healthcheck URL")
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fs.Arg(0), nil)
	if err != nil {
		return err
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	res.Body.Close()
	if res.StatusCode/100 != 2 {
		return fmt.Errorf("%s answered %s", fs.Arg(0), res.Status)
	}
	return nil
}
