package db

import "time"

// UTC returns a nullable timestamptz as read (pgx scans it in the local
// zone) in UTC, or nil for NULL: the form the API, events and webhook
// payloads show times in.
func UTC(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}
