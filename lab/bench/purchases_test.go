package bench_test

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"boxoffice/domain/payments/sandbox"
	"boxoffice/lab/bench"
	"boxoffice/platform/db"
)

func TestSandboxRole(t *testing.T) {
	t.Parallel()
	for role, want := range map[string]bool{
		sandbox.ProviderRole:                   true,
		"sandbox_webhooks":                     true,
		"api sandbox-authorize-payment-intent": true,
		"api sandbox-decline-payment-intent":   true,
		"api receive-stripe-webhook":           false, // Boxoffice's ingress
		"payments":                             false,
		"api create-hold":                      false,
		"relay":                                false,
		"other":                                false,
	} {
		t.Run(role, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, want, bench.SandboxRole(role))
		})
	}
}

// The Boxoffice total leaves the sandbox's work out; the sandbox total is
// only that; "all roles" is both.
func TestPrintCostsSplitsBoxofficeFromTheSandbox(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	bench.PrintCosts(&out, []db.RoleCost{
		{Role: "payments", Cost: db.Cost{Transactions: 20, WriteTransactions: 10, Statements: 40, RowsWritten: 30, StatementTime: 50 * time.Millisecond}},
		{Role: "sandbox_webhooks", Cost: db.Cost{Transactions: 4, WriteTransactions: 4, Statements: 6, RowsWritten: 8}},
		{Role: sandbox.ProviderRole, Cost: db.Cost{Transactions: 6, WriteTransactions: 2, Statements: 10, RowsWritten: 4}},
		{Role: "relay", Cost: db.Cost{Transactions: 10, WriteTransactions: 10, Statements: 20, RowsWritten: 20, StatementTime: 10 * time.Millisecond}},
	}, 10)
	totals := map[string]string{}
	for line := range strings.Lines(out.String()) {
		if name, figures, ok := strings.Cut(strings.TrimSpace(line), "  "); ok {
			totals[name] = strings.Join(strings.Fields(figures), " ")
		}
	}
	require.Equal(t, "3.00 2.00 6.00 5.00 6.00", totals["Boxoffice (all product roles)"], out.String())
	require.Equal(t, "1.00 0.60 1.60 1.20 0.00", totals["sandbox (stand-in for Stripe)"], out.String())
	require.Equal(t, "4.00 2.60 7.60 6.20 6.00", totals["all roles"], out.String())
}
