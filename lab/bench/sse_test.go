package bench

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// eachEvent gives each data line with the name of its event, skips
// comments and blank lines, and stops reading when told to.
func TestEachEventReadsAnOrderStream(t *testing.T) {
	t.Parallel()
	stream := ": keep-alive\n\nevent: status\ndata: {\"status\":\"pending_payment\"}\n\n" +
		"event: payment\ndata: {\"paymentIntentId\":\"pi_1\"}\n\n: ping\n" +
		"event: status\ndata: {\"status\":\"ticketed\"}\n\nevent: status\ndata: {\"status\":\"refunded\"}\n\n"
	type got struct{ event, data string }
	var all []got
	eachEvent(strings.NewReader(stream), func(event, data string) bool {
		all = append(all, got{event, data})
		return true
	})
	require.Equal(t, []got{
		{"status", `{"status":"pending_payment"}`},
		{"payment", `{"paymentIntentId":"pi_1"}`},
		{"status", `{"status":"ticketed"}`},
		{"status", `{"status":"refunded"}`},
	}, all)

	n := 0
	eachEvent(strings.NewReader(stream), func(event, data string) bool {
		n++
		return event != "payment"
	})
	require.Equal(t, 2, n, "it stops at the data line its function refuses")
}
