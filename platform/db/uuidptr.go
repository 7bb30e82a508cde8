package db

import (
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"
)

// tryWrapUUIDPointer encodes a *uuid.UUID (sqlc's type for a nullable
// uuid parameter) as the uuid it points to, or NULL. pgx does not follow
// pointers to a driver.Valuer (the Valuer might mean something else by
// nil), so without it every such parameter went through uuid.UUID.Value:
// formatted as text, then parsed back into bytes, for each query of an
// order read and each Stripe event recorded.
func tryWrapUUIDPointer(value any) (pgtype.WrappedEncodePlanNextSetter, any, bool) {
	if _, ok := value.(*uuid.UUID); ok {
		return &uuidPointerPlan{}, uuid.UUID{}, true
	}
	return nil, nil, false
}

type uuidPointerPlan struct{ next pgtype.EncodePlan }

func (p *uuidPointerPlan) SetNext(next pgtype.EncodePlan) { p.next = next }

func (p *uuidPointerPlan) Encode(value any, buf []byte) ([]byte, error) {
	ptr := value.(*uuid.UUID)
	if ptr == nil {
		return nil, nil
	}
	return p.next.Encode(*ptr, buf)
}
