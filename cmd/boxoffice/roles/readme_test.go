package roles

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"boxoffice/testkit/dbtest"
)

// The README's "A purchase, step by step" runs as printed, twice, against
// `boxoffice dev` with the values dev prints, and ends with a ticketed
// order: a newcomer's first purchase reaches its tickets, and a second run
// holds other seats. It needs bash, curl and jq, as the README does.
func TestReadmePurchaseRunsAsPrinted(t *testing.T) {
	t.Parallel()
	for _, tool := range []string{"bash", "curl", "jq"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("the README's walkthrough needs %s", tool)
		}
	}
	readme, err := os.ReadFile("../../../README.md")
	require.NoError(t, err)
	section := string(readme)
	i := strings.Index(section, "### A purchase, step by step")
	require.GreaterOrEqual(t, i, 0, "the README has its purchase walkthrough")
	block := regexp.MustCompile("(?s)```sh\n(.*?)```").FindStringSubmatch(section[i:])
	require.NotNil(t, block)
	script := block[1]
	for _, placeholder := range []string{"API=http://127.0.0.1:8080\n", "BUYER=<buyer token>; EVENT=<demo event id>\n"} {
		require.Contains(t, script, placeholder, "the walkthrough starts from the values make run prints")
		script = strings.Replace(script, placeholder, "", 1)
	}

	url := dbtest.NewURL(t)
	env := func(name string) string {
		return map[string]string{"DATABASE_URL": url, "HTTP_ADDR": "127.0.0.1:0", "OPS_ADDR": "127.0.0.1:0", "BOXOFFICE_LOG_LEVEL": "warn"}[name]
	}
	out := startDev(t, env)
	printed := regexp.MustCompile(`(?s)API\s+(\S+).*Demo event\s+(\S+).*Buyer token\s+(\S+)`)
	require.Eventually(t, func() bool { return printed.MatchString(out.String()) }, 60*time.Second, 50*time.Millisecond, "dev printed: %s", out)
	m := printed.FindStringSubmatch(out.String())

	for run := 1; run <= 2; run++ {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", script)
		cmd.Env = append(os.Environ(), "API="+m[1], "EVENT="+m[2], "BUYER="+m[3])
		got, err := cmd.CombinedOutput()
		cancel()
		require.NoError(t, err, "run %d printed: %s", run, got)
		require.Contains(t, string(got), `"status": "ticketed"`, "run %d ends with a ticketed order: %s", run, got)
		require.Contains(t, string(got), `"qrPayload": "BX1.`, "run %d shows signed tickets", run)
		// The API keeps a seat map for up to a second (a hint; only a hold
		// decides): a second run started within it would pick the seats
		// this one bought, be refused, and wait forever for an order.
		// Start it once the map shows them taken, as a buyer a moment
		// later would see it.
		require.Eventually(t, func() bool { return firstSeatsTaken(t, m[1], m[2]) }, 10*time.Second, 50*time.Millisecond,
			"the seat map shows run %d's seats taken", run)
	}
}

// firstSeatsTaken reports whether the first two seats of the event's
// seat map are no longer available (the walkthrough's first run takes
// them on a fresh event).
func firstSeatsTaken(t *testing.T, api, event string) bool {
	t.Helper()
	res, err := http.Get(api + "/v1/events/" + event + "/seats")
	require.NoError(t, err)
	defer res.Body.Close()
	var m struct {
		Seats []struct {
			Status string `json:"status"`
		} `json:"seats"`
	}
	require.NoError(t, json.NewDecoder(res.Body).Decode(&m))
	require.GreaterOrEqual(t, len(m.Seats), 2)
	return m.Seats[0].Status != "available" && m.Seats[1].Status != "available"
}
