package waitingroom

import (
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"boxoffice/domain/catalog"
	"boxoffice/platform/admission"
	"boxoffice/testkit/dbtest"
)

// An onsale is its organizer's: anyone else is told the event does not
// exist, and cannot change its settings.
func TestOrganizerOnsaleIsTheOrganizers(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ev := createEvent(t, pool, 2)
	room := NewRoom(RoomConfig{
		Store:      NewMemoryStore(),
		Signer:     admission.NewSigner(admission.SignerConfig{Key: []byte("test-admission-key-0123456789abcdef01234567")}),
		Events:     catalog.New(pool),
		Onsales:    NewOnsales(pool),
		Controller: NewController(ControllerConfig{Initial: 10, Logger: testLogger(t)}),
		Logger:     testLogger(t),
	})
	ctx := t.Context()

	o, err := room.OrganizerOnsale(ctx, ev.OrganizerID, ev.ID, nil)
	require.NoError(t, err)
	require.Equal(t, ev.ID, o.Event.ID)
	require.False(t, o.Event.Settings.Paused)

	changed := false
	_, err = room.OrganizerOnsale(ctx, uuid.New(), ev.ID, func(s *Settings) { changed = true; s.Paused = true })
	require.ErrorIs(t, err, ErrEventNotFound, "another organizer's event does not exist")
	require.False(t, changed, "nor is it changed")

	o, err = room.OrganizerOnsale(ctx, ev.OrganizerID, ev.ID, func(s *Settings) { s.Paused = true; s.SeatLimit = 3 })
	require.NoError(t, err)
	require.True(t, o.Event.Settings.Paused)
	require.Equal(t, 3, o.Event.Settings.SeatLimit)
	stored, err := NewOnsales(pool).Get(ctx, ev.ID)
	require.NoError(t, err)
	require.True(t, stored.Paused, "the change is stored")

	_, err = room.OrganizerOnsale(ctx, ev.OrganizerID, uuid.New(), nil)
	require.ErrorIs(t, err, ErrEventNotFound)

	noSettings := NewRoom(RoomConfig{
		Store: NewMemoryStore(), Events: catalog.New(pool), Logger: testLogger(t),
		Signer:     admission.NewSigner(admission.SignerConfig{Key: []byte("test-admission-key-0123456789abcdef01234567")}),
		Controller: NewController(ControllerConfig{Initial: 10, Logger: testLogger(t)}),
	})
	_, err = noSettings.OrganizerOnsale(ctx, ev.OrganizerID, ev.ID, nil)
	require.ErrorIs(t, err, ErrNoSettings)
}
