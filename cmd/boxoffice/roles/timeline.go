package roles

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/google/uuid"

	"boxoffice/domain/timeline"
)

// runTimeline runs `boxoffice timeline [-json] <orderId>`: one order's
// story (package timeline) from DATABASE_URL, the database of the order's
// cell (BOXOFFICE_CELL), one line per fact oldest first, or with -json
// the whole story as one JSON document. An order the database does not
// hold is an error.
func runTimeline(ctx context.Context, args []string, getenv func(string) string, out io.Writer) error {
	fs := flag.NewFlagSet("timeline", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print the story as one JSON document (orderId, eventId, status, correlationId, facts[])")
	if err := ParseFlags(fs, args); err != nil {
		return err
	}
	rest := fs.Args()
	if len(rest) > 1 { // flags after the order id
		if err := ParseFlags(fs, rest[1:]); err != nil {
			return err
		}
		rest = append(rest[:1], fs.Args()...)
	}
	if len(rest) != 1 {
		return &UsageError{errors.New("timeline takes one order id: boxoffice timeline [-json] <orderId>")}
	}
	orderID, err := uuid.Parse(rest[0])
	if err != nil {
		return &UsageError{fmt.Errorf("order id %q is not a UUID", rest[0])}
	}
	_, pool, err := operatorPool(ctx, getenv, 1)
	if err != nil {
		return err
	}
	defer pool.Close()
	t, err := timeline.Read(ctx, pool, orderID)
	if errors.Is(err, timeline.ErrNotFound) {
		return fmt.Errorf("order %s: not in this database (is DATABASE_URL the order's cell?)", orderID)
	} else if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(t)
	}
	return t.WriteText(out)
}
