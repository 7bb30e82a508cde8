package roles

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"text/tabwriter"
	"time"

	"boxoffice/ops/dlq"
)

const dlqUsage = `usage: boxoffice dlq list [-consumer NAME] [-reason TEXT] [-older-than 1h]
       boxoffice dlq show SEQ
       boxoffice dlq replay -by WHO -why TEXT SEQ...
       boxoffice dlq discard -by WHO -why TEXT SEQ...
The dead letters of BOXOFFICE_CELL's bus namespace, on NATS_URL.`

// runDLQ runs `boxoffice dlq`: the dead-letter workflow (package dlq).
func runDLQ(ctx context.Context, args []string, getenv func(string) string, out io.Writer) error {
	if len(args) == 0 {
		return &UsageError{errors.New(dlqUsage)}
	}
	if args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprintln(out, dlqUsage)
		return flag.ErrHelp
	}
	sub, args := args[0], args[1:]
	fs := flag.NewFlagSet("dlq "+sub, flag.ContinueOnError)
	consumer := fs.String("consumer", "", "list: only this consumer's dead letters")
	reason := fs.String("reason", "", "list: only dead letters whose reason contains this")
	olderThan := fs.Duration("older-than", 0, "list: only dead letters stored at least this long ago")
	by := fs.String("by", "", "replay, discard: who asks (logged)")
	why := fs.String("why", "", "replay, discard: why (logged)")
	if err := ParseFlags(fs, args); err != nil {
		return err
	}
	cfg, err := LoadConfig(getenv, "NATS_URL")
	if err != nil {
		return err
	}
	logger := cfg.logger()
	nc, js, err := ConnectBus(ctx, cfg, "dlq", logger)
	if err != nil {
		return err
	}
	defer nc.Close()
	q := dlq.New(js, cfg.Streams.Namespace, logger)
	seqs := func() ([]uint64, error) {
		if fs.NArg() == 0 {
			return nil, errors.New(dlqUsage)
		}
		var out []uint64
		for _, a := range fs.Args() {
			n, err := strconv.ParseUint(a, 10, 64)
			if err != nil || n == 0 {
				return nil, fmt.Errorf("%q is not a dead letter's sequence", a)
			}
			out = append(out, n)
		}
		return out, nil
	}
	switch sub {
	case "list":
		letters, err := q.List(ctx, dlq.Filter{Consumer: *consumer, Reason: *reason, OlderThan: *olderThan}, time.Now())
		if err != nil {
			return err
		}
		w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
		fmt.Fprintln(w, "SEQ\tSTORED\tCONSUMER\tDELIVERIES\tEVENT ID\tSUBJECT\tREASON")
		for _, l := range letters {
			fmt.Fprintf(w, "%d\t%s\t%s\t%d\t%s\t%s\t%s\n", l.Seq, l.StoredAt.UTC().Format(time.RFC3339), l.Consumer,
				l.NumDelivered, l.EventID, l.OriginalSubject, l.Reason)
		}
		return w.Flush()
	case "show":
		ns, err := seqs()
		if err != nil {
			return err
		}
		for _, n := range ns {
			l, err := q.Get(ctx, n)
			if err != nil {
				return fmt.Errorf("dead letter %d: %w", n, err)
			}
			fmt.Fprintf(out, "seq %d, stored %s\n", l.Seq, l.StoredAt.UTC().Format(time.RFC3339Nano))
			keys := make([]string, 0, len(l.Header))
			for k := range l.Header {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				fmt.Fprintf(out, "%s: %s\n", k, l.Header.Get(k))
			}
			fmt.Fprintf(out, "\n%s\n", l.Data)
		}
		return nil
	case "replay", "discard":
		ns, err := seqs()
		if err != nil {
			return err
		}
		act := q.Replay
		if sub == "discard" {
			act = q.Discard
		}
		for _, n := range ns {
			if err := act(ctx, n, *by, *why); err != nil {
				return fmt.Errorf("dead letter %d: %w", n, err)
			}
			fmt.Fprintf(out, "%s %d\n", map[string]string{"replay": "replayed", "discard": "discarded"}[sub], n)
		}
		return nil
	default:
		fmt.Fprintln(os.Stderr, dlqUsage)
		return fmt.Errorf("dlq: unknown command %q", sub)
	}
}
