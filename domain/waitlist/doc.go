// Package waitlist is the waitlist of sold-out events (issue 30 item 5):
// a buyer joins an event's waitlist for some seats of a price category
// when none is on sale; seats that come back (an expired hold, a failed
// or canceled order, a refund that resells, blocks the organizer
// releases) are offered to waiting buyers in waitlist order, each offer
// reserving its seats for a limited time; an offer not accepted in time
// passes to the next buyer.
//
// It owns waitlist_entries. The seats of an offer are a reservation that
// package purchase writes (seat_blocks rows naming the entry, which
// hold_reserve counts as taken), and accepting an offer is a hold
// (purchase.Service.HoldTx) in the transaction that ends the reservation,
// so an offered seat is never held by anyone else, never owned twice,
// and never lost: it is reserved, held, or back on sale.
//
// Guarantees:
//   - One live (waiting or offered) entry per buyer and event (a unique
//     index).
//   - An entry joins only while its category has no seat on sale, checked
//     under the event's waitlist lock that every offer round takes.
//   - An offer round (OfferRound) offers what is free when it runs; the
//     consumer (consumers.NewWaitlist) runs one for every event that
//     frees seats, in its inbox transaction, so a redelivered event
//     offers nothing twice.
//   - Acceptance and expiry of one offer lock the entry's row first:
//     exactly one of them happens.
//
// docs/organizers.md ("Waitlist") says what organizers and buyers see.
package waitlist
