package roles

import (
	"context"
	"errors"
	"flag"
	"testing"

	"github.com/stretchr/testify/require"
)

// --help is help: the commands whose flags do not exit by themselves
// return flag.ErrHelp, which Main answers with exit status 0 (their usage
// already printed), not with the error.
func TestHelpIsNotAnError(t *testing.T) {
	for _, cmd := range []string{"audit", "fence", "reconcile", "healthcheck"} {
		for _, arg := range []string{"-h", "--help"} {
			err := Run(context.Background(), cmd, []string{arg})
			require.ErrorIs(t, err, flag.ErrHelp, "%s %s", cmd, arg)
			require.Zero(t, exitCode(err), "%s %s", cmd, arg)
		}
	}
	require.Equal(t, 2, exitCode(ErrUnknownCommand))
	require.Equal(t, 1, exitCode(errors.New("failed")))
	require.Zero(t, exitCode(context.Canceled))
}
