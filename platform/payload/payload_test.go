package payload_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"boxoffice/platform/payload"
)

type ticket struct {
	ID    uuid.UUID `json:"id"`
	Gates []string  `json:"gates"`
}

type order struct {
	ID       uuid.UUID         `json:"id"`
	Tickets  []ticket          `json:"tickets"`
	Seats    []uuid.UUID       `json:"seats"`
	Labels   map[string]string `json:"labels"`
	Refunds  []int             `json:"refunds,omitempty"`
	Notes    []string          `json:"notes,omitzero"`
	Next     *order            `json:"next"`
	At       time.Time         `json:"at"`
	Raw      []byte            `json:"raw"`
	Any      any               `json:"any"`
	Skipped  []int             `json:"-"`
	Nested   [2][]int
	ByStatus map[string][]int `json:"byStatus"`
}

func TestMarshal(t *testing.T) {
	t.Parallel()

	t.Run("NilSlicesAndMapsAreEmpty", func(t *testing.T) {
		t.Parallel()
		in := order{
			Tickets:  []ticket{{}},
			Next:     &order{},
			Any:      ticket{},
			ByStatus: map[string][]int{"a": nil},
		}
		got, err := payload.Marshal(in)
		require.NoError(t, err)
		require.Contains(t, string(got), `"tickets":[{"id":"00000000-0000-0000-0000-000000000000","gates":[]}]`)
		require.Contains(t, string(got), `"seats":[]`)
		require.Contains(t, string(got), `"next":{"id":"00000000-0000-0000-0000-000000000000","tickets":[],"seats":[],"labels":{}`)
		require.Contains(t, string(got), `"labels":{}`)
		require.Contains(t, string(got), `"byStatus":{"a":[]}`)
		require.Contains(t, string(got), `"Nested":[[],[]]`)
		require.NotContains(t, string(got), "refunds", "omitempty: absent")
		require.NotContains(t, string(got), "notes", "omitzero: absent, not []")
		require.NotContains(t, string(got), "Skipped")
	})

	t.Run("NeverModifiesItsInput", func(t *testing.T) {
		t.Parallel()
		in := &order{Tickets: []ticket{{}}, ByStatus: map[string][]int{"a": nil}}
		_, err := payload.Marshal(in)
		require.NoError(t, err)
		require.Nil(t, in.Seats)
		require.Nil(t, in.Tickets[0].Gates)
		require.Nil(t, in.ByStatus["a"])
	})

	t.Run("NilPointersAndScalarsStayNull", func(t *testing.T) {
		t.Parallel()
		got, err := payload.Marshal(order{})
		require.NoError(t, err)
		require.Contains(t, string(got), `"next":null`)
		require.Contains(t, string(got), `"any":null`)
		require.Contains(t, string(got), `"raw":null`, "[]byte is a base64 string, not an array")
	})

	t.Run("ReturnsWhatNeedsNoFillingAsItIs", func(t *testing.T) {
		t.Parallel()
		in := &ticket{Gates: []string{"a"}}
		require.Same(t, in, payload.Fill(in))
		require.Nil(t, payload.Fill(nil))
	})

	t.Run("EncodesOneLine", func(t *testing.T) {
		t.Parallel()
		var buf bytes.Buffer
		require.NoError(t, payload.Encode(&buf, map[string]any{"html": "<a>", "list": []int(nil)}))
		require.Equal(t, "{\"html\":\"<a>\",\"list\":[]}\n", buf.String())
	})
}
