package tickets_test

import (
	"crypto/ed25519"
	"encoding/base64"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"boxoffice/domain/tickets"
)

func newSigner(t testing.TB) *tickets.Signer {
	t.Helper()
	seed, err := tickets.GenerateSeed()
	require.NoError(t, err)
	s, err := tickets.NewSigner(seed)
	require.NoError(t, err)
	return s
}

func sampleTicket() tickets.Ticket {
	order, seat := uuid.New(), uuid.New()
	return tickets.Ticket{
		ID: tickets.ID(order, seat), OrderID: order, SeatID: seat, EventID: uuid.New(),
		IssuedAt: time.Date(2027, 6, 1, 19, 30, 0, 0, time.UTC),
	}
}

// Ticket ids are part of the data: a changed namespace or name layout
// would issue a second ticket for every seat already ticketed.
func TestIDIsAStableUUIDv5(t *testing.T) {
	t.Parallel()
	order := uuid.MustParse("01900000-0000-7000-8000-000000000001")
	seat := uuid.MustParse("01900000-0000-7000-8000-000000000002")
	id := tickets.ID(order, seat)
	require.Equal(t, uuid.Version(5), id.Version())
	require.Equal(t, uuid.RFC4122, id.Variant())
	require.Equal(t, id, tickets.ID(order, seat))
	require.Equal(t, uuid.NewSHA1(tickets.Namespace, append(order[:], seat[:]...)), id)
	require.Equal(t, "fac6f168-6bc8-5015-b4ab-8e50e8c2b382", id.String(), "ticket ids must never change")
	require.NotEqual(t, id, tickets.ID(seat, order))
	require.NotEqual(t, id, tickets.ID(order, uuid.New()))
}

func TestSignVerify(t *testing.T) {
	t.Parallel()

	t.Run("RoundTripsEveryField", func(t *testing.T) {
		t.Parallel()
		s := newSigner(t)
		tk := sampleTicket()
		tk.IssuedAt = tk.IssuedAt.Add(750 * time.Millisecond).In(time.FixedZone("x", 3600))
		payload := s.Sign(tk)
		require.True(t, strings.HasPrefix(payload, "BX1."))
		require.LessOrEqual(t, len(payload), 190, "payload must stay small enough for a small QR code")
		require.Equal(t, payload, s.Sign(tk), "signing is deterministic")

		got, err := tickets.Verify(s.PublicKey(), payload)
		require.NoError(t, err)
		want := tk
		want.IssuedAt = tk.IssuedAt.Truncate(time.Second).UTC()
		require.Equal(t, want, got)
	})

	t.Run("FailsWithAnotherKey", func(t *testing.T) {
		t.Parallel()
		payload := newSigner(t).Sign(sampleTicket())
		_, err := tickets.Verify(newSigner(t).PublicKey(), payload)
		require.ErrorIs(t, err, tickets.ErrInvalidPayload)
	})

	t.Run("FailsWhenAnyCharacterChanges", func(t *testing.T) {
		t.Parallel()
		s := newSigner(t)
		payload := s.Sign(sampleTicket())
		for i := range len(payload) {
			b := []byte(payload)
			switch b[i] {
			case 'A':
				b[i] = 'B'
			default:
				b[i] = 'A'
			}
			_, err := tickets.Verify(s.PublicKey(), string(b))
			require.ErrorIs(t, err, tickets.ErrInvalidPayload, "byte %d changed", i)
		}
	})

	t.Run("FailsWhenTheSignedBodyIsAltered", func(t *testing.T) {
		t.Parallel()
		s := newSigner(t)
		payload := s.Sign(sampleTicket())
		parts := strings.Split(payload, ".")
		body, err := base64.RawURLEncoding.DecodeString(parts[1])
		require.NoError(t, err)
		body[40] ^= 0x01 // a bit of the seat id
		forged := parts[0] + "." + base64.RawURLEncoding.EncodeToString(body) + "." + parts[2]
		_, err = tickets.Verify(s.PublicKey(), forged)
		require.ErrorIs(t, err, tickets.ErrInvalidPayload)
	})

	t.Run("RejectsMalformedPayloads", func(t *testing.T) {
		t.Parallel()
		s := newSigner(t)
		payload := s.Sign(sampleTicket())
		parts := strings.Split(payload, ".")
		for name, p := range map[string]string{
			"Empty":          "",
			"OtherVersion":   "BX2." + parts[1] + "." + parts[2],
			"NoSignature":    parts[0] + "." + parts[1],
			"ExtraPart":      payload + ".AAAA",
			"PaddedBody":     parts[0] + "." + parts[1] + "==." + parts[2],
			"ShortBody":      parts[0] + "." + parts[1][:20] + "." + parts[2],
			"ShortSignature": parts[0] + "." + parts[1] + "." + parts[2][:40],
			"StdAlphabet":    parts[0] + "." + strings.NewReplacer("-", "+", "_", "/").Replace(parts[1]) + "+/." + parts[2],
		} {
			_, err := tickets.Verify(s.PublicKey(), p)
			require.ErrorIs(t, err, tickets.ErrInvalidPayload, name)
		}
		_, err := tickets.Verify(ed25519.PublicKey{1, 2, 3}, payload)
		require.Error(t, err)
	})
}

func TestSeeds(t *testing.T) {
	t.Parallel()
	seed, err := tickets.GenerateSeed()
	require.NoError(t, err)
	require.Len(t, seed, tickets.SeedSize)
	other, err := tickets.GenerateSeed()
	require.NoError(t, err)
	require.NotEqual(t, seed, other)

	parsed, err := tickets.ParseSeed(base64.StdEncoding.EncodeToString(seed))
	require.NoError(t, err)
	require.Equal(t, seed, parsed)
	parsed, err = tickets.ParseSeed(base64.RawStdEncoding.EncodeToString(seed) + "\n")
	require.NoError(t, err)
	require.Equal(t, seed, parsed)

	a, err := tickets.NewSigner(seed)
	require.NoError(t, err)
	b, err := tickets.NewSigner(parsed)
	require.NoError(t, err)
	require.Equal(t, a.PublicKey(), b.PublicKey(), "the seed alone determines the key")

	for _, bad := range []string{"", "not base64!", base64.StdEncoding.EncodeToString(seed[:31])} {
		_, err := tickets.ParseSeed(bad)
		require.Error(t, err)
	}
	_, err = tickets.NewSigner(seed[:16])
	require.Error(t, err)
}
