package roles

import (
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/google/uuid"

	"boxoffice/platform/auth"
)

func runToken(args []string) error {
	fs := flag.NewFlagSet("token", flag.ContinueOnError)
	role := fs.String("role", "buyer", "buyer, organizer, or scanner (a door scanner of the organizer -org)")
	sub := fs.String("sub", "", "user UUID (default: a new one)")
	org := fs.String("org", "", "organizer UUID, for organizers and scanners (default: a new one)")
	ttl := fs.Duration("ttl", 24*time.Hour, "lifetime")
	if err := ParseFlags(fs, args); err != nil {
		return err
	}
	// The dev secret is allowed: a token is only minted here, and only a
	// server holding the same secret accepts it — with the dev secret,
	// only `boxoffice dev`, which every other role refuses to be.
	cfg, err := LoadDevConfig(os.Getenv, "BOXOFFICE_JWT_SECRET")
	if err != nil {
		return err
	}
	id := auth.Identity{Role: auth.Role(*role)}
	if id.UserID, err = uuidOrNew(*sub); err != nil {
		return fmt.Errorf("-sub: %w", err)
	}
	switch id.Role {
	case auth.RoleBuyer:
	case auth.RoleOrganizer, auth.RoleScanner:
		if id.OrganizerID, err = uuidOrNew(*org); err != nil {
			return fmt.Errorf("-org: %w", err)
		}
	default:
		return fmt.Errorf("-role must be buyer, organizer or scanner")
	}
	tok, err := auth.Mint(cfg.JWTSecret, id, *ttl)
	if err != nil {
		return err
	}
	fmt.Println(tok)
	return nil
}

func uuidOrNew(s string) (uuid.UUID, error) {
	if s == "" {
		return uuid.New(), nil
	}
	return uuid.Parse(s)
}
