package roles

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/debug"
)

// UsageError is a command line that does not parse: an unknown command or
// flag, or a flag's bad value. Main prints it on one line and exits 2.
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

// ParseFlags parses args into fs the way every command does: -h or --help
// prints the flags to standard output and returns flag.ErrHelp (exit 0);
// any other error is a UsageError (exit 2, one line), with nothing else
// printed. fs's own error handling is replaced.
func ParseFlags(fs *flag.FlagSet, args []string) error {
	fs.Init(fs.Name(), flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		fs.SetOutput(os.Stdout)
		fmt.Fprintf(os.Stdout, "Usage of %s:\n", fs.Name())
		fs.PrintDefaults()
		return err
	case err != nil:
		return &UsageError{err}
	}
	return nil
}

// Version and Commit are the release and its VCS commit, set at build
// time (make build and the Dockerfile pass them:
// -ldflags "-X boxoffice/cmd/boxoffice/roles.Version=v1.2.3 -X …Commit=<sha>");
// else what Go recorded in the binary, if anything.
var Version, Commit = "", ""

// VersionLine is what `boxoffice version` prints: the version, the VCS
// commit and its time, and whether the tree had local changes.
func VersionLine(binary string) string {
	version, commit, at, dirty := readBuild()
	return fmt.Sprintf("%s %s (commit %s%s%s)", binary, version, commit, at, dirty)
}

// buildVersion is the release and commit of this binary, as VersionLine
// reads them.
func buildVersion() (version, commit string) {
	version, commit, _, _ = readBuild()
	return version, commit
}

func readBuild() (version, commit, at, dirty string) {
	version, commit = Version, cmp.Or(Commit, "unknown")
	if bi, ok := debug.ReadBuildInfo(); ok {
		if version == "" {
			version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				commit = cmp.Or(Commit, s.Value)
			case "vcs.time":
				at = ", " + s.Value
			case "vcs.modified":
				if s.Value == "true" {
					dirty = ", modified"
				}
			}
		}
	}
	if version == "" {
		version = "(devel)"
	}
	return version, commit, at, dirty
}
