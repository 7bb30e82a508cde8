package bench

import (
	"bufio"
	"io"
	"strings"
)

// eachEvent reads the Server-Sent Events of an order's stream from r and
// calls fn with each data line and the name of the event it belongs to,
// until fn returns false or r ends: the one reader of that stream for the
// purchase and stream benchmarks.
func eachEvent(r io.Reader, fn func(event, data string) (more bool)) {
	sc := bufio.NewScanner(r)
	var event string
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			if !fn(event, strings.TrimPrefix(line, "data: ")) {
				return
			}
		}
	}
}
