// Command boxoffice is the one production binary of Boxoffice. Each
// subcommand is a role that can be scaled and fail on its own; the roles
// and their wiring are in package roles. The benchmarks and the onsale
// simulator are in cmd/boxoffice-lab, so their plotting and progress-bar
// libraries stay out of this binary.
package main

import "boxoffice/cmd/boxoffice/roles"

var usage = "usage: boxoffice <command> [flags]\n\n" + roles.Usage("commands", roles.Commands)

func main() { roles.Main("boxoffice", usage, roles.Run) }
