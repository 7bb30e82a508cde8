// The API's operations: what the OpenAPI document says of each (its
// method and path, who may call it, its summary, description and
// problems) and which handler serves it. This file is the contract's
// table of contents; each resource's file holds its inputs, outputs and
// handlers.

package handlers

import (
	"context"
	"fmt"
	"net/http"
	"reflect"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"boxoffice/domain/tickets"
	"boxoffice/platform/auth"
)

// Register registers every operation on api.
func (h *Handlers) Register(api huma.API) {
	h.registerHealth(api)
	h.registerEvents(api)
	h.registerOrganizer(api)
	h.registerSeatBlocks(api)
	h.registerWaitlist(api)
	h.registerSeatScores(api)
	h.registerCheckIns(api)
	h.registerWaitingRoom(api)
	h.registerOnsale(api)
	h.registerOnsalePhases(api)
	h.registerHolds(api)
	h.registerOrders(api)
	h.registerTimeline(api)
	h.registerTickets(api)
	h.registerStripeWebhook(api)
	h.registerSandbox(api)
	h.registerWebhooks(api)
	h.registerAPIKeys(api)
}

func (h *Handlers) registerHealth(api huma.API) {
	register(api, huma.Operation{
		OperationID: "get-healthz", Method: http.MethodGet, Path: "/healthz",
		Summary: "Liveness: the process is up", Tags: []string{"Operations"},
		Description: "Public. 200 while the process serves HTTP, whatever its dependencies: restart it only when this stops answering.",
	}, func(ctx context.Context, _ *struct{}) (*HealthOutput, error) {
		out := &HealthOutput{Status: http.StatusOK}
		out.Body.Status = "ok"
		return out, nil
	})
	register(api, huma.Operation{
		OperationID: "get-readyz", Method: http.MethodGet, Path: "/readyz",
		Summary: "Readiness: the database answers (NATS is reported, not required)",
		Description: "Public. 200 when the purchase cells' databases answer within 2 seconds, with each dependency's state in checks; " +
			"503 when one does not, so a load balancer sends buyers elsewhere. NATS is reported but not required: holds are written to the outbox either way.",
		Tags: []string{"Operations"},
		Responses: map[string]*huma.Response{
			"503": {Description: "A required dependency does not answer."},
		},
	}, h.ready)
}

func (h *Handlers) registerEvents(api huma.API) {
	register(api, secured(huma.Operation{
		OperationID: "create-event", Method: http.MethodPost, Path: "/v1/events",
		Summary: "Create an event with its seats",
		Description: "Organizers only. Seats come from a `sections` generator or an explicit `seats` list, up to 100,000 in one request. " +
			"Send an Idempotency-Key to retry safely: a retry with it answers the event the first request created.",
		Tags: []string{"Events"}, DefaultStatus: http.StatusCreated,
		MaxBodyBytes: 16 << 20,
		Errors:       []int{http.StatusBadRequest, http.StatusConflict, http.StatusUnprocessableEntity, http.StatusRequestEntityTooLarge},
	}, auth.RoleOrganizer), h.createEvent)

	readResponses := func(body reflect.Type) map[string]*huma.Response {
		return map[string]*huma.Response{
			"200": {Description: "OK", Content: map[string]*huma.MediaType{"application/json": {
				Schema: api.OpenAPI().Components.Schemas.Schema(body, true, ""),
			}}},
			"304": {Description: "Not Modified: the ETag sent as If-None-Match is current. No body."},
		}
	}
	const cached = " Compressed with gzip when Accept-Encoding allows; a strong ETag, and 304 for a current If-None-Match. " +
		"Rate limited per client address (429 with Retry-After)."
	register(api, huma.Operation{
		OperationID: "get-event", Method: http.MethodGet, Path: "/v1/events/{eventId}",
		Summary: "Get an event", Tags: []string{"Events"},
		Description: "An event does not change once created." + cached,
		Errors:      []int{http.StatusNotFound, http.StatusUnprocessableEntity, http.StatusTooManyRequests},
		Responses:   readResponses(reflect.TypeFor[EventBody]()),
	}, h.getEvent)

	register(api, huma.Operation{
		OperationID: "list-seats", Method: http.MethodGet, Path: "/v1/events/{eventId}/seats",
		Summary:     "Get the seat map",
		Description: "Every seat with its status: available, held or sold. A hint that may be a second stale: only a hold decides." + cached,
		Tags:        []string{"Events"},
		Errors:      []int{http.StatusNotFound, http.StatusUnprocessableEntity, http.StatusTooManyRequests},
		Responses:   readResponses(reflect.TypeFor[SeatsOutputBody]()),
	}, h.listSeats)
}

func (h *Handlers) registerOrganizer(api huma.API) {
	register(api, secured(huma.Operation{
		OperationID: "list-events", Method: http.MethodGet, Path: "/v1/events",
		Summary: "List your events", Tags: []string{"Events"},
		Description: "The calling organizer's events, oldest first; page with `cursor`.",
		Errors:      []int{http.StatusUnprocessableEntity},
	}, auth.RoleOrganizer), h.listEvents)
	register(api, secured(huma.Operation{
		OperationID: "get-event-sales", Method: http.MethodGet, Path: "/v1/events/{eventId}/sales",
		Summary: "Get your event's sales", Tags: []string{"Events"},
		Description: "Seats by what they are now (also per price category), tickets checked in, orders by status, and the money taken and " +
			"refunded, all read at one moment. Only the event's organizer sees it; for anyone else the event " +
			"does not exist (404).",
		Errors: []int{http.StatusNotFound, http.StatusUnprocessableEntity},
	}, auth.RoleOrganizer), h.getEventSales)
	register(api, secured(huma.Operation{
		OperationID: "list-event-orders", Method: http.MethodGet, Path: "/v1/events/{eventId}/orders",
		Summary: "List your event's orders", Tags: []string{"Events"},
		Description: "Newest first; filter by status and buyer, page with `cursor`. Only the event's organizer " +
			"sees them; for anyone else the event does not exist (404).",
		Errors: []int{http.StatusNotFound, http.StatusUnprocessableEntity},
	}, auth.RoleOrganizer), h.listEventOrders)
}

func (h *Handlers) registerSeatBlocks(api huma.API) {
	const only = " Only the event's organizer may; for anyone else the event does not exist (404)."
	register(api, secured(huma.Operation{
		OperationID: "block-seats", Method: http.MethodPost, Path: "/v1/events/{eventId}/seat-blocks",
		Summary: "Hold seats back", Tags: []string{"Events"},
		Description: "Blocks seats (production kills, press, sponsors): all or none. A blocked seat cannot be held by a buyer, " +
			"shows as `sold` on the seat map and is not counted as available anywhere. Seats held or sold are refused " +
			"(409 with their ids); a seat blocked already keeps its block with the new reason. Answers every blocked seat of the event. " +
			"Idempotent by nature, so it takes no Idempotency-Key: a retry with the same body changes nothing (a block asked again " +
			"as it is keeps its `blockedAt`) and answers as the first request did, unless the blocks changed in between." + only,
		Errors: []int{http.StatusNotFound, http.StatusConflict, http.StatusUnprocessableEntity},
	}, auth.RoleOrganizer), h.blockSeats)
	register(api, secured(huma.Operation{
		OperationID: "list-seat-blocks", Method: http.MethodGet, Path: "/v1/events/{eventId}/seat-blocks",
		Summary: "List held-back seats", Tags: []string{"Events"},
		Description: "Every blocked seat of the event with its reason." + only,
		Errors:      []int{http.StatusNotFound, http.StatusUnprocessableEntity},
	}, auth.RoleOrganizer), h.listSeatBlocks)
	register(api, secured(huma.Operation{
		OperationID: "release-seats", Method: http.MethodPost, Path: "/v1/events/{eventId}/seat-blocks/release",
		Summary: "Release held-back seats", Tags: []string{"Events"},
		Description: "Ends the blocks of the given seats: they are on sale again. Seats that were not blocked are ignored. " +
			"Idempotent by nature, so it takes no Idempotency-Key: a retry releases nothing twice and its `released` lists only " +
			"the seats it released itself (none, when the first request's answer was lost); list-seat-blocks tells what is blocked." + only,
		Errors: []int{http.StatusNotFound, http.StatusUnprocessableEntity},
	}, auth.RoleOrganizer), h.releaseSeats)
	register(api, secured(huma.Operation{
		OperationID: "issue-order", Method: http.MethodPost, Path: "/v1/events/{eventId}/issued-orders",
		Summary: "Issue comps or a box office sale", Tags: []string{"Events"},
		Description: "Issues an order for seats that are available or blocked, all or none, under the same seat ownership rules " +
			"as a buyer's hold (a seat held or sold is refused, 409 with its ids): free (`comp`) or paid outside the payment " +
			"provider (`box_office`, with its `reference`). The order is paid at once; its tickets are issued as a buyer's are, " +
			"with the same events and webhooks, and it is listed in the event's orders and sales with its channel. " +
			"A retry cannot issue the seats twice: without an Idempotency-Key it gets 409, with one the first answer." + only,
		DefaultStatus: http.StatusCreated,
		Errors:        []int{http.StatusNotFound, http.StatusConflict, http.StatusUnprocessableEntity},
	}, auth.RoleOrganizer), h.issueOrder)
}

func (h *Handlers) registerWaitlist(api huma.API) {
	const buyers = "Buyers only; another buyer's entry does not exist (404). "
	register(api, secured(huma.Operation{
		OperationID: "join-waitlist", Method: http.MethodPost, Path: "/v1/events/{eventId}/waitlist",
		Summary: "Join a sold-out event's waitlist", Tags: []string{"Waitlist"}, DefaultStatus: http.StatusCreated,
		Description: buyers + "Only while the category has no seat on sale (else 409 `" + TypeWaitlistSeatsAvailable + "`: hold one); " +
			"one live entry per buyer and event (409 `" + TypeWaitlistJoined + "`). Seats that come back (expired holds, " +
			"failed or canceled orders, refunds that resell, blocks the organizer releases) are offered in waitlist order, " +
			"the whole quantity or nothing: the entry becomes `offered`, with its seats reserved for you until `offerExpiresAt`; " +
			"the organizer gets a `waitlist.offered` webhook. Poll the entry, and accept the offer before it expires.",
		MaxBodyBytes: 1 << 10,
		Errors:       []int{http.StatusNotFound, http.StatusConflict, http.StatusUnprocessableEntity},
	}, auth.RoleBuyer), h.joinWaitlist)
	register(api, secured(huma.Operation{
		OperationID: "get-waitlist-entry", Method: http.MethodGet, Path: "/v1/events/{eventId}/waitlist/{entryId}",
		Summary: "Your waitlist entry and its offer", Tags: []string{"Waitlist"},
		Description: buyers + "Its state, its place in the queue, and while an offer is live its seats and expiry.",
		Errors:      []int{http.StatusNotFound, http.StatusUnprocessableEntity},
	}, auth.RoleBuyer), h.getWaitlistEntry)
	register(api, secured(huma.Operation{
		OperationID: "leave-waitlist", Method: http.MethodDelete, Path: "/v1/events/{eventId}/waitlist/{entryId}",
		Summary: "Leave a waitlist", Tags: []string{"Waitlist"},
		Description: buyers + "The entry becomes `left`; a live offer ends with it and its seats pass to the next buyer. " +
			"Leaving an entry that already ended changes nothing. Answers the entry.",
		Errors: []int{http.StatusNotFound, http.StatusUnprocessableEntity},
	}, auth.RoleBuyer), h.leaveWaitlist)
	register(api, secured(huma.Operation{
		OperationID: "accept-waitlist-offer", Method: http.MethodPost, Path: "/v1/events/{eventId}/waitlist/{entryId}/accept",
		Summary: "Accept a waitlist offer", Tags: []string{"Waitlist"},
		Description: buyers + "Holds the offered seats for you, as a hold does (the offer is your admission: no waiting room " +
			"token), creating an order pending payment (`orderId`): pay it as any order. In one transaction with the end of the " +
			"offer, so an offer is accepted or expires, never both. An offer that expired, or an entry still waiting, answers " +
			"409 `" + TypeWaitlistOfferNotLive + "`; accepting again answers the accepted entry.",
		Errors: []int{http.StatusForbidden, http.StatusNotFound, http.StatusConflict, http.StatusUnprocessableEntity, http.StatusServiceUnavailable},
	}, auth.RoleBuyer), h.acceptWaitlistOffer)
	h.registerWaitlistStream(api)
}

func (h *Handlers) registerWaitlistStream(api huma.API) {
	register(api, secured(huma.Operation{
		OperationID: "stream-waitlist-entry-events", Method: http.MethodGet, Path: "/v1/events/{eventId}/waitlist/{entryId}/events",
		Summary: "Follow your waitlist entry", Tags: []string{"Waitlist"},
		Description: "Buyers only. Server-Sent Events: one `entry` event with the entry at once, then one each time it changes " +
			"(an offer is made, accepted, expires). The stream ends when the entry is accepted, expired or left, and after " +
			"10 minutes at most; reconnect to go on following. It counts against the buyer's open order event streams " +
			"(beyond them 429 with Retry-After).",
		Errors: []int{http.StatusNotFound, http.StatusUnprocessableEntity, http.StatusTooManyRequests},
		Responses: sseResponses("A text/event-stream of `entry` events.",
			"Events `event: entry` whose `data` is a WaitlistEntryBody as JSON.",
			map[string]any{
				"x-event-data": api.OpenAPI().Components.Schemas.Schema(reflect.TypeFor[WaitlistEntryBody](), true, ""),
			}),
	}, auth.RoleBuyer), h.streamWaitlistEntry)
}

func (h *Handlers) registerSeatScores(api huma.API) {
	register(api, secured(huma.Operation{
		OperationID: "set-seat-scores", Method: http.MethodPut, Path: "/v1/events/{eventId}/seat-scores",
		Summary: "Say which seats are best", Tags: []string{"Events"},
		Description: "Sets the score best-available holds pick by (higher is better; every seat starts at 0, so without scores seats " +
			"are picked in seat map order, which also breaks ties), per seat or per row, all or none. Scores not named keep theirs. " +
			"A hold already under way picks by the scores it read. Only the event's organizer may; for anyone else the event does not exist (404).",
		DefaultStatus: http.StatusNoContent,
		Errors:        []int{http.StatusNotFound, http.StatusUnprocessableEntity},
	}, auth.RoleOrganizer), h.setSeatScores)
}

func (h *Handlers) registerCheckIns(api huma.API) {
	const who = " For the event's organizer and their scanners (role scanner, minted for the organizer); for " +
		"anyone else the event does not exist (404)."
	// The clock skew the door allows a scan's time, in words.
	skew := fmt.Sprintf("%d minutes", tickets.MaxClockSkew/time.Minute)
	register(api, secured(huma.Operation{
		OperationID: "check-in", Method: http.MethodPost, Path: "/v1/events/{eventId}/check-ins",
		Summary: "Check a ticket in at the door", Tags: []string{"Check-in"}, DefaultStatus: http.StatusCreated,
		MaxBodyBytes: 4 << 10,
		Description: "Verifies the QR payload's signature, refuses a revoked ticket (409 `" + TypeTicketRevoked + "`) " +
			"and records the ticket's first check-in. The first scan of a ticket wins, however many scanners race: " +
			"a second scan answers 409 `" + TypeAlreadyCheckedIn + "` with when and at which gate the ticket was " +
			"first used. A payload that is not a signed ticket of this event (by the ticket's order, whatever event the " +
			"payload names) answers 422 `" + TypeTicketInvalid + "`; a ticket issued more than " + skew + " after the " +
			"server's now (a clock is off) 422 `" + TypeScannedAtOutOfRange + "`. Nothing is recorded for a refused scan. " +
			"Idempotent by nature, so it takes no Idempotency-Key: a scan retried after its answer was lost records nothing " +
			"twice and answers 409 `" + TypeAlreadyCheckedIn + "` whose `checkIn` is the recorded one (its ticket, gate and time), " +
			"which tells a scanner that retried at its own gate that the ticket is in." + who,
		Errors: []int{http.StatusNotFound, http.StatusConflict, http.StatusUnprocessableEntity, http.StatusServiceUnavailable},
	}, auth.RoleOrganizer, auth.RoleScanner), h.checkIn)
	register(api, secured(huma.Operation{
		OperationID: "check-in-batch", Method: http.MethodPost, Path: "/v1/events/{eventId}/check-ins/batch",
		Summary: "Upload an offline scanner's scans", Tags: []string{"Check-in"},
		MaxBodyBytes: 1 << 20,
		Description: "Up to 1,000 scans with the scanner's own scan times, answered one by one and in order: " +
			"accepted, duplicate (with the winning check-in), revoked, invalid (not a signed ticket of this event, " +
			"by the ticket's order) or scanned-at-out-of-range (scannedAt more than " + skew + " before the " +
			"ticket was issued or after the server's now, so a backdated scan cannot win and no check-in lies in " +
			"the future). Only accepted scans are recorded; the rest of the batch proceeds whatever one scan's outcome. " +
			"Within a batch the earliest scan of a ticket wins; a ticket already in from before is a duplicate, " +
			"also when the same batch is uploaded again: the upload is idempotent by nature (it takes no Idempotency-Key), " +
			"and a re-upload's duplicates carry the check-ins its first upload recorded, at its own gates and scan times." + who,
		Errors: []int{http.StatusNotFound, http.StatusUnprocessableEntity, http.StatusServiceUnavailable},
	}, auth.RoleOrganizer, auth.RoleScanner), h.checkInBatch)
	register(api, secured(huma.Operation{
		OperationID: "count-check-ins", Method: http.MethodGet, Path: "/v1/events/{eventId}/check-ins",
		Summary: "Count the event's check-ins per gate", Tags: []string{"Check-in"},
		Description: "How many tickets came in through each gate, and when the last was scanned." + who,
		Errors:      []int{http.StatusNotFound, http.StatusUnprocessableEntity},
	}, auth.RoleOrganizer, auth.RoleScanner), h.countCheckIns)
}

func (h *Handlers) registerWaitingRoom(api huma.API) {
	errs := []int{http.StatusNotFound, http.StatusUnprocessableEntity, http.StatusTooManyRequests, http.StatusServiceUnavailable}
	// queued is the 202 both operations answer while the buyer waits; the
	// body is the 200's (huma declares that one from WaitingRoomOutput).
	queued := func() map[string]*huma.Response {
		return map[string]*huma.Response{"202": {
			Description: "Queued: your place and estimated wait; poll GET again after pollAfterSeconds (also sent as Retry-After).",
			Content:     map[string]*huma.MediaType{"application/json": {Schema: &huma.Schema{Ref: "#/components/schemas/WaitingRoomBody"}}},
			Headers: map[string]*huma.Param{
				"Retry-After":      {Description: "The same as pollAfterSeconds.", Schema: &huma.Schema{Type: huma.TypeString}},
				"RateLimit-Policy": {Description: "The buyer's waiting-room request budget, as on 200.", Schema: &huma.Schema{Type: huma.TypeString}},
				"RateLimit":        {Description: "What is left of it after this request, as on 200.", Schema: &huma.Schema{Type: huma.TypeString}},
			},
		}}
	}
	joinErrs := append([]int{http.StatusForbidden}, errs...)
	register(api, secured(huma.Operation{
		OperationID: "join-waiting-room", Method: http.MethodPost, Path: "/v1/events/{eventId}/waiting-room",
		Summary: "Join the waiting room",
		Description: "Buyers only. Idempotent: joining again returns your place. While the onsale is open, " +
			"nobody is queued and there is spare capacity, you are admitted at once (200, with an admission token); " +
			"otherwise you are queued (202) and poll GET until admitted. A buyer whose admission was revoked is answered status revoked, without a token. Rate limited per buyer and per client address (429 with Retry-After; RateLimit and RateLimit-Policy say what is left of the buyer's budget); " +
			"503 with Retry-After while the waiting room cannot admit anyone. " +
			"During a presale phase, send your presale code in the X-Presale-Code request header (never in the URL; " +
			"case-insensitive, at most 64 characters): your first join uses one of the code's uses, joining again does not. " +
			"Without a valid code with a use left, 403 presale-code-required; the budget is charged before the code is checked, so past it a guess is a 429. Outside a presale the header is ignored.",
		Tags: []string{"Waiting room"}, Errors: joinErrs, Responses: queued(),
	}, auth.RoleBuyer), h.joinWaitingRoom)
	register(api, secured(huma.Operation{
		OperationID: "get-waiting-room", Method: http.MethodGet, Path: "/v1/events/{eventId}/waiting-room",
		Summary: "Get your place in the waiting room",
		Description: "Buyers only. Your position and estimated wait, or your admission token once admitted (the same token on every poll). " +
			"Status revoked, without a token, when the organizer revoked your admission. 404 if you have not joined or your admission expired.",
		Tags: []string{"Waiting room"}, Errors: errs, Responses: queued(),
	}, auth.RoleBuyer), h.pollWaitingRoom)
}

func (h *Handlers) registerOnsale(api huma.API) {
	errs := []int{http.StatusNotFound, http.StatusUnprocessableEntity}
	register(api, secured(huma.Operation{
		OperationID: "get-onsale", Method: http.MethodGet, Path: "/v1/events/{eventId}/onsale",
		Summary:     "Get the onsale's settings and admission rate",
		Description: "The event's organizer only (404 for anyone else). Shows R, the reason for its last change, and the release controller's signals.",
		Tags:        []string{"Onsale"}, Errors: errs,
	}, auth.RoleOrganizer), h.getOnsale)
	register(api, secured(huma.Operation{
		OperationID: "update-onsale", Method: http.MethodPatch, Path: "/v1/events/{eventId}/onsale",
		Summary:     "Schedule, pause or resume the onsale, cap R, limit seats per buyer",
		Description: "The event's organizer only. Changes reach every API process within a second.",
		Tags:        []string{"Onsale"}, Errors: errs,
	}, auth.RoleOrganizer), h.patchOnsale)
	register(api, secured(huma.Operation{
		OperationID: "revoke-admission", Method: http.MethodPost, Path: "/v1/events/{eventId}/onsale/revocations",
		Summary: "Revoke a buyer's admission",
		Description: "The event's organizer only. The buyer's admission token is refused on holds from now on " +
			"(within a second on every API process); holds already made stand. 404 if the buyer holds no admission. " +
			"Idempotent by nature, so it takes no Idempotency-Key: revoking a revoked admission again answers 204 and changes nothing.",
		Tags: []string{"Onsale"}, DefaultStatus: http.StatusNoContent,
		Errors: []int{http.StatusNotFound, http.StatusUnprocessableEntity, http.StatusServiceUnavailable},
	}, auth.RoleOrganizer), h.revokeAdmission)
}

func (h *Handlers) registerOnsalePhases(api huma.API) {
	errs := []int{http.StatusNotFound, http.StatusUnprocessableEntity}
	register(api, secured(huma.Operation{
		OperationID: "get-onsale-phases", Method: http.MethodGet, Path: "/v1/events/{eventId}/onsale/phases",
		Summary:     "Get the onsale's phases",
		Description: "The event's organizer only (404 for anyone else).",
		Tags:        []string{"Onsale"}, Errors: errs,
	}, auth.RoleOrganizer), h.getOnsalePhases)
	register(api, secured(huma.Operation{
		OperationID: "set-onsale-phases", Method: http.MethodPut, Path: "/v1/events/{eventId}/onsale/phases",
		Summary: "Set the onsale's phases (presale, general sale)",
		Description: "The event's organizer only. Replaces the phases. The phase in force is the latest opened; " +
			"a presale admits only buyers with one of its codes (create them with create-presale-codes), and a phase " +
			"with categoryIds sells only those categories. Holds check the phase in force when they are made.",
		Tags: []string{"Onsale"}, Errors: []int{http.StatusNotFound, http.StatusConflict, http.StatusUnprocessableEntity},
	}, auth.RoleOrganizer), h.setOnsalePhases)
	register(api, secured(huma.Operation{
		OperationID: "create-presale-codes", Method: http.MethodPost, Path: "/v1/events/{eventId}/onsale/presale-codes",
		Summary: "Create presale codes in bulk",
		Description: "The event's organizer only. Creates count random codes, or the codes given, for a presale phase; " +
			"each admits maxUses buyers, whose seats together may not exceed maxSeats. The codes are in this answer only: " +
			"only their hashes are stored. A code the phase already has is a 409, and nothing is created. " +
			"Send an Idempotency-Key to retry safely: a retry with it answers the same codes (kept sealed for the key's 24 hours) " +
			"and creates none; without one, a retry creates new random codes, or answers 409 for your own.",
		Tags: []string{"Onsale"}, DefaultStatus: http.StatusCreated, MaxBodyBytes: 1 << 20,
		Errors: []int{http.StatusNotFound, http.StatusConflict, http.StatusUnprocessableEntity},
	}, auth.RoleOrganizer), h.createPresaleCodes)
}

func (h *Handlers) registerHolds(api huma.API) {
	register(api, secured(huma.Operation{
		OperationID: "create-hold", Method: http.MethodPost, Path: "/v1/events/{eventId}/holds",
		Summary: "Hold seats",
		Description: "Buyers only, with an admission token. Holds all requested seats or none, " +
			"creating an order pending payment. Idempotent per user and Idempotency-Key: a retry answers the first request's order " +
			"with its current status, even once the admission token has expired or been revoked (a new key needs a valid token). " +
			"Rate limited per buyer (5 a second, bursts of 10, by default): beyond it 429 with Retry-After, and nothing is held.",
		Tags: []string{"Holds"}, DefaultStatus: http.StatusAccepted,
		MaxBodyBytes: 4 << 10,
		Errors: []int{http.StatusBadRequest, http.StatusNotFound, http.StatusConflict,
			http.StatusRequestEntityTooLarge, http.StatusUnprocessableEntity, http.StatusTooManyRequests},
	}, auth.RoleBuyer), h.createHold)
	register(api, secured(huma.Operation{
		OperationID: "create-best-available-hold", Method: http.MethodPost, Path: "/v1/events/{eventId}/best-available-holds",
		Summary: "Hold the best available seats",
		Description: "Buyers only, with an admission token. Picks `quantity` seats of the price category and holds them, " +
			"in one transaction and with every guarantee of create-hold (all or none, one hold per seat, the onsale's limits, " +
			"blocked seats and presale phase): the best free run of adjacent seats (one row, consecutive numbers), best by the " +
			"scores the organizer set (else in seat map order); when no run is free, the best seats apart unless `adjacentOnly`. " +
			"Concurrent buyers do not queue for the same seats: each takes the next best, and only a buyer who would " +
			"otherwise come up short waits a moment for seats another buyer's hold is still trying. 409 not-enough-seats when the " +
			"category has fewer free seats (or no free run) than asked. Idempotent per user and Idempotency-Key, as create-hold: " +
			"a retry answers the same order and seats. Rate limited with create-hold, from the same budget.",
		Tags: []string{"Holds"}, DefaultStatus: http.StatusAccepted,
		MaxBodyBytes: 4 << 10,
		Errors: []int{http.StatusBadRequest, http.StatusNotFound, http.StatusConflict,
			http.StatusRequestEntityTooLarge, http.StatusUnprocessableEntity, http.StatusTooManyRequests},
	}, auth.RoleBuyer), h.createBestAvailableHold)
}

func (h *Handlers) registerOrders(api huma.API) {
	register(api, secured(huma.Operation{
		OperationID: "list-orders", Method: http.MethodGet, Path: "/v1/orders",
		Summary: "List your orders", Tags: []string{"Orders"},
		Description: "Buyers only (an organizer reads their events' orders at `GET /v1/events/{eventId}/orders`). " +
			"The caller's orders across every event, newest first, each with its seats, payment and tickets as " +
			"`GET /v1/orders/{orderId}` shows it (the client secret only while payment is pending). Filter by event " +
			"and by status; page with `cursor`.",
		Errors: []int{http.StatusUnprocessableEntity, http.StatusServiceUnavailable},
	}, auth.RoleBuyer), h.listOrders)
	register(api, secured(huma.Operation{
		OperationID: "get-order", Method: http.MethodGet, Path: "/v1/orders/{orderId}",
		Summary: "Get one of your orders", Tags: []string{"Orders"},
		Description: "Buyers only. Only the order's owner sees it; for anyone else it does not exist (404).",
		Errors:      []int{http.StatusNotFound, http.StatusUnprocessableEntity},
	}, auth.RoleBuyer), h.getOrder)
	register(api, secured(huma.Operation{
		OperationID: "cancel-order", Method: http.MethodPost, Path: "/v1/orders/{orderId}/cancel",
		Summary: "Cancel one of your orders before payment", Tags: []string{"Orders"},
		Description: "Buyers only. Gives the seats back while the order awaits payment, and cancels its payment authorization if " +
			"there is one. Canceling a canceled order returns it unchanged. An order past payment answers 409 " +
			"`" + TypeOrderNotCancelable + "`; an order that is not yours, 404.",
		Errors: []int{http.StatusNotFound, http.StatusConflict, http.StatusUnprocessableEntity},
	}, auth.RoleBuyer), h.cancelOrder)
	register(api, secured(huma.Operation{
		OperationID: "refund-order", Method: http.MethodPost, Path: "/v1/orders/{orderId}/refund",
		Summary: "Refund a paid order of your event", Tags: []string{"Orders"}, DefaultStatus: http.StatusAccepted,
		Description: "For the organizer of the order's event: the order becomes refunding and the refund is sent to the " +
			"payment provider; it becomes refunded once the provider confirms. Its tickets are revoked (refused at " +
			"the door); with `resell: true` their seats go back on sale, else they stay off sale. With `ticketIds`, only those " +
			"tickets of a ticketed order are refunded (their seats' prices): the order stays ticketed and lists the refund under " +
			"`refunds` (requested, then succeeded once the provider confirms). Asking again returns the order " +
			"without a second refund. An order you issued (a comp or a box office sale, paid outside the provider) is voided instead: " +
			"nothing goes to the provider, its tickets are revoked (their seats back on sale with `resell: true`) and it becomes " +
			"canceled at once (`order.canceled`, reason `voided_by_organizer`), as a whole (`ticketIds` answers 409). " +
			"An order that was not paid (or, with `ticketIds`, not ticketed) answers 409 `" + TypeOrderNotRefundable + "`; " +
			"a ticket that is not the order's, 422; an order of another organizer's event, 404.",
		Errors: []int{http.StatusNotFound, http.StatusConflict, http.StatusUnprocessableEntity},
	}, auth.RoleOrganizer), h.refundOrder)
	register(api, secured(huma.Operation{
		OperationID: "stream-order-events", Method: http.MethodGet, Path: "/v1/orders/{orderId}/events",
		Summary: "Follow the status of one of your orders", Tags: []string{"Orders"},
		Description: "Buyers only. Server-Sent Events: one `status` event with the current status at once, then one per status " +
			"change. The stream ends when the order reaches ticketed, failed, canceled or refunded, and after " +
			"10 minutes at most; reconnect to go on following. Comment lines keep idle connections open. " +
			"A buyer may have a few streams open on one order and a few more across orders (4 and 16 by " +
			"default, per API process); beyond them the stream is refused with 429 and Retry-After.",
		Errors: []int{http.StatusNotFound, http.StatusUnprocessableEntity, http.StatusTooManyRequests},
		Responses: sseResponses("A text/event-stream of `status` events, and one `payment` event once the order's PaymentIntent exists.",
			"Events `event: status` whose `data` is an OrderStatusEvent as JSON (with an `id` naming the status, for Last-Event-ID), "+
				"and `event: payment` whose `data` is an OrderPaymentEvent: the PaymentIntent is ready to confirm "+
				"(read its client secret from GET /v1/orders/{orderId}).",
			map[string]any{
				"x-event-data":         api.OpenAPI().Components.Schemas.Schema(reflect.TypeFor[OrderStatusEvent](), true, ""),
				"x-payment-event-data": api.OpenAPI().Components.Schemas.Schema(reflect.TypeFor[OrderPaymentEvent](), true, ""),
			}),
	}, auth.RoleBuyer), h.streamOrderEvents)
}

func (h *Handlers) registerTimeline(api huma.API) {
	register(api, secured(huma.Operation{
		OperationID: "get-order-timeline", Method: http.MethodGet, Path: "/v1/orders/{orderId}/timeline",
		Summary: "Get the story of an order of your event", Tags: []string{"Orders"},
		Description: "For the organizer of the order's event: every fact the system keeps about the order, oldest first — " +
			"the order and its hold, each event written for it with its id and cause and each consumer that applied it, " +
			"the payment and declined attempts, the payment provider's webhooks (deliveries ignored as duplicates " +
			"included), tickets and check-ins, refunds, and the webhook messages, deliveries and attempts sent to you. " +
			"Events and their consumers are kept as long as the inbox retention (35 days by default), provider " +
			"webhooks and webhook messages as long as theirs (30 days by default); an older order's story has " +
			"what is left. An order of another organizer's event, 404.",
		Errors: []int{http.StatusNotFound, http.StatusUnprocessableEntity},
	}, auth.RoleOrganizer), h.getOrderTimeline)
}

func (h *Handlers) registerTickets(api huma.API) {
	register(api, huma.Operation{
		OperationID: "get-ticket-signing-key", Method: http.MethodGet, Path: "/v1/ticket-signing-key",
		Summary: "Get the public key that signs tickets", Tags: []string{"Tickets"},
		Description: "A ticket's QR code holds `BX1.<body>.<signature>`, both parts unpadded base64url: body is the " +
			"ticket id, order id, seat id and event id (16 bytes each) and the issue time (8 bytes, big-endian unix " +
			"seconds); signature is the Ed25519 signature of the ASCII text `BX1.<body>`. A scanner that keeps " +
			"this key verifies tickets offline. Public; no authentication.",
		Errors: []int{http.StatusNotFound},
	}, h.getTicketSigningKey)
	register(api, secured(huma.Operation{
		OperationID: "list-revoked-tickets", Method: http.MethodGet, Path: "/v1/events/{eventId}/revoked-tickets",
		Summary: "List the event's revoked tickets", Tags: []string{"Tickets"},
		Description: "Tickets revoked by a refund, oldest revocation first. A revoked ticket's QR payload still " +
			"verifies against the signing key, so scanners that verify offline refresh this list and refuse what is " +
			"on it. For the event's organizer and their scanners (role scanner, minted for the organizer), who " +
			"refresh it; for anyone else the event does not exist (404).",
		Errors: []int{http.StatusNotFound, http.StatusUnprocessableEntity},
	}, auth.RoleOrganizer, auth.RoleScanner), h.listRevokedTickets)
}

func (h *Handlers) registerStripeWebhook(api huma.API) {
	register(api, huma.Operation{
		OperationID: "receive-stripe-webhook", Method: http.MethodPost, Path: "/v1/webhooks/stripe",
		Summary: "Receive a Stripe webhook",
		Description: "For Stripe. The signature is verified over the raw body before anything is parsed; " +
			"the event is stored with its effect before the 200, so anything not stored is retried by Stripe. " +
			"400 when the signature does not verify or its timestamp is more than the tolerance (5 minutes) in the past or the future, " +
			"and when a signed event's ids are not Stripe ids; nothing is stored then.",
		Tags: []string{"Payments"}, MaxBodyBytes: 256 << 10,
		// The bytes are the signed message: nothing may look at them first.
		SkipValidateBody: true,
		Errors:           []int{http.StatusBadRequest, http.StatusNotFound},
	}, h.receiveStripeWebhook)
}

// registerSandbox registers the sandbox's buyer actions: only when the
// sandbox provider is configured, or when the document is written for
// the contract (Config.DescribeSandbox).
func (h *Handlers) registerSandbox(api huma.API) {
	if h.cells.Cells()[0].Sandbox == nil && !h.cfg.DescribeSandbox {
		return
	}
	errs := []int{http.StatusNotFound, http.StatusConflict, http.StatusUnprocessableEntity}
	for _, a := range sandboxActions {
		register(api, secured(huma.Operation{
			OperationID: "sandbox-" + a.action + "-payment-intent", Method: http.MethodPost,
			Path:    "/v1/sandbox/payment-intents/{id}/" + a.action,
			Summary: a.summary, Tags: []string{"Sandbox"},
			Description: sandboxOnly + " " + a.description,
			Errors:      errs,
			Extensions:  map[string]any{testModeOnly: true},
		}, auth.RoleBuyer), func(ctx context.Context, in *SandboxIntentInput) (*SandboxIntentOutput, error) {
			return h.sandboxAction(ctx, a.action, in.IntentID, a.act)
		})
	}
}

func (h *Handlers) registerWebhooks(api huma.API) {
	tags := []string{"Webhooks"}
	errs := func(codes ...int) []int {
		return append([]int{http.StatusUnprocessableEntity, http.StatusNotFound}, codes...)
	}
	register(api, secured(huma.Operation{
		OperationID: "create-webhook-endpoint", Method: http.MethodPost, Path: "/v1/webhook-endpoints",
		Summary: "Subscribe an endpoint to webhooks",
		Description: "Deliveries are signed per Standard Webhooks (webhook-id, webhook-timestamp, webhook-signature). " +
			"The answer carries the whsec_ secret once. The URL must be https and resolve to public addresses only. " +
			"An organizer has at most 20 endpoints (unless the deployment says otherwise), enabled or disabled (409 " + TypeEndpointLimit + "), " +
			"and one endpoint per URL, however its scheme, host or default port are spelled (409 " + TypeEndpointURLInUse + "). " +
			"Send an Idempotency-Key to retry safely: a retry with it answers the same endpoint and secret.",
		Tags: tags, DefaultStatus: http.StatusCreated, MaxBodyBytes: 64 << 10, Errors: errs(http.StatusBadRequest, http.StatusConflict),
	}, auth.RoleOrganizer), h.createWebhookEndpoint)
	register(api, secured(huma.Operation{
		OperationID: "list-webhook-endpoints", Method: http.MethodGet, Path: "/v1/webhook-endpoints",
		Summary: "List your webhook endpoints", Tags: tags, Errors: errs(),
		Description: "For organizers: every endpoint you created, with its subscribed event types, status and rate, never its secret.",
	}, auth.RoleOrganizer), h.listWebhookEndpoints)
	register(api, secured(huma.Operation{
		OperationID: "get-webhook-endpoint", Method: http.MethodGet, Path: "/v1/webhook-endpoints/{endpointId}",
		Summary: "Get a webhook endpoint",
		Description: "Its settings and `health`: the last success, the failure streak, the circuit breaker's state, and when and why it was disabled. " +
			"Never returns the secret.",
		Tags: tags, Errors: errs(),
	}, auth.RoleOrganizer), h.getWebhookEndpoint)
	register(api, secured(huma.Operation{
		OperationID: "update-webhook-endpoint", Method: http.MethodPatch, Path: "/v1/webhook-endpoints/{endpointId}",
		Summary:     "Change a webhook endpoint",
		Description: "409 " + TypeEndpointURLInUse + " when another of your endpoints has the new URL.",
		Tags:        tags, MaxBodyBytes: 64 << 10, Errors: errs(http.StatusBadRequest, http.StatusConflict),
	}, auth.RoleOrganizer), h.updateWebhookEndpoint)
	register(api, secured(huma.Operation{
		OperationID: "delete-webhook-endpoint", Method: http.MethodDelete, Path: "/v1/webhook-endpoints/{endpointId}",
		Summary: "Delete a webhook endpoint", Description: "Deletes its pending and past deliveries; messages and their attempt history stay until retention.",
		Tags: tags, DefaultStatus: http.StatusNoContent, Errors: errs(),
	}, auth.RoleOrganizer), h.deleteWebhookEndpoint)
	register(api, secured(huma.Operation{
		OperationID: "rotate-webhook-secret", Method: http.MethodPost, Path: "/v1/webhook-endpoints/{endpointId}/rotate-secret",
		Summary: "Rotate an endpoint's signing secret",
		Description: "Returns the new secret once. The old one keeps signing beside it for 24 hours: both signatures are sent. " +
			"Send an Idempotency-Key to retry safely: a retry with it answers the same new secret instead of rotating again.",
		Tags: tags, Errors: errs(http.StatusConflict),
	}, auth.RoleOrganizer), h.rotateWebhookSecret)
	register(api, secured(huma.Operation{
		OperationID: "recover-webhook-endpoint", Method: http.MethodPost, Path: "/v1/webhook-endpoints/{endpointId}/recover",
		Summary: "Re-send what failed, or needs review, in a time window",
		Description: "Queues every failed, dead or needs_review delivery to this endpoint of messages since `since` (and before `until`, when given); " +
			"their attempts are recorded with trigger recover. This is how deliveries that need review (the receiver gave a terminal answer) are retried " +
			"once the receiver is fixed. Who asked and the `reason` are recorded. 409 when the endpoint is disabled; 422 when until is not after since. " +
			"Send an Idempotency-Key to retry safely: a retry with it answers the first count and queues nothing more.",
		Tags: tags, DefaultStatus: http.StatusAccepted, MaxBodyBytes: 4 << 10, Errors: errs(http.StatusBadRequest, http.StatusConflict),
	}, auth.RoleOrganizer), h.recoverWebhookEndpoint)
	register(api, secured(huma.Operation{
		OperationID: "test-webhook-endpoint", Method: http.MethodPost, Path: "/v1/webhook-endpoints/{endpointId}/test",
		Summary: "Send a test delivery",
		Description: "Queues a `webhook.test` message for this endpoint only, whatever its event type filter: signed with its secret, " +
			"sent, retried and recorded like every other message, so it shows in the message list and its attempts. " +
			"409 when the endpoint is disabled. Send an Idempotency-Key to retry safely: a retry with it answers the first test message.",
		Tags: tags, DefaultStatus: http.StatusAccepted, Errors: errs(http.StatusConflict),
	}, auth.RoleOrganizer), h.testWebhookEndpoint)
	h.registerWebhookMessages(api, tags, errs)
}

func (h *Handlers) registerWebhookMessages(api huma.API, tags []string, errs func(...int) []int) {
	register(api, secured(huma.Operation{
		OperationID: "list-webhook-messages", Method: http.MethodGet, Path: "/v1/webhook-messages",
		Summary: "List the webhook messages of your events",
		Description: "Newest first, each with its delivery status per endpoint (succeeded, pending, failed, needs_review, dead); " +
			"filter by type, delivery status, endpoint and time; page with `cursor`.",
		Tags: tags, Errors: errs(),
	}, auth.RoleOrganizer), h.listWebhookMessages)
	register(api, secured(huma.Operation{
		OperationID: "list-webhook-attempts", Method: http.MethodGet, Path: "/v1/webhook-messages/{messageId}/attempts",
		Summary: "List every attempt to send a message", Tags: tags, Errors: errs(),
		Description: "For organizers: each attempt at each of your endpoints, oldest first, with its trigger (original, retry, replay or recover), outcome, status code and latency. 404 for a message of another organizer.",
	}, auth.RoleOrganizer), h.listWebhookAttempts)
	register(api, secured(huma.Operation{
		OperationID: "replay-webhook-message", Method: http.MethodPost, Path: "/v1/webhook-messages/{messageId}/replay",
		Summary: "Send a message again",
		Description: "Same bytes, same webhook-id, whatever the delivery's status (a needs_review one included); the attempt is recorded with trigger replay, " +
			"and who asked and the `reason` are recorded. 409 when the named endpoint is disabled. " +
			"Send an Idempotency-Key to retry safely: a retry with it answers the first count and queues nothing more.",
		Tags: tags, DefaultStatus: http.StatusAccepted, MaxBodyBytes: 4 << 10, Errors: errs(http.StatusBadRequest, http.StatusConflict),
	}, auth.RoleOrganizer), h.replayWebhookMessage)
}

func (h *Handlers) registerAPIKeys(api huma.API) {
	tags := []string{"API keys"}
	register(api, secured(huma.Operation{
		OperationID: "create-api-key", Method: http.MethodPost, Path: "/v1/api-keys",
		Summary: "Create an API key",
		Description: "For organizers, with a bearer token (an API key cannot create keys): a long-lived key for your own " +
			"systems, which acts as you (the organizer role of your organization, never a buyer) when sent as " +
			"`Authorization: Bearer bo_live_…`. The answer carries the key once; only a hash of it is stored. " +
			"You have at most 25 keys that are not revoked (409 " + TypeAPIKeyLimit + "). " +
			"Send an Idempotency-Key to retry safely: a retry with it answers the same key, which is kept sealed for the key's 24 hours.",
		Tags: tags, DefaultStatus: http.StatusCreated, MaxBodyBytes: 4 << 10,
		Errors: []int{http.StatusBadRequest, http.StatusNotFound, http.StatusConflict, http.StatusUnprocessableEntity},
	}, auth.RoleOrganizer), h.createAPIKey)
	register(api, secured(huma.Operation{
		OperationID: "list-api-keys", Method: http.MethodGet, Path: "/v1/api-keys",
		Summary: "List your API keys", Tags: tags, Errors: []int{http.StatusNotFound},
		Description: "For organizers, with a bearer token: every key you created, revoked ones included, oldest first (at most 500), never the keys themselves.",
	}, auth.RoleOrganizer), h.listAPIKeys)
	register(api, secured(huma.Operation{
		OperationID: "revoke-api-key", Method: http.MethodDelete, Path: "/v1/api-keys/{apiKeyId}",
		Summary: "Revoke an API key",
		Description: "For organizers, with a bearer token: the key is refused (401) by every request that starts after " +
			"this one answers, in every process of the deployment: nothing caches a key. Revoking a revoked key " +
			"succeeds again; it stays listed.",
		Tags: tags, DefaultStatus: http.StatusNoContent, Errors: []int{http.StatusNotFound, http.StatusUnprocessableEntity},
	}, auth.RoleOrganizer), h.revokeAPIKey)
	register(api, huma.Operation{
		OperationID: "get-admission-keys", Method: http.MethodGet, Path: "/v1/admission-keys",
		Summary: "Get the public keys that sign admission tokens", Tags: []string{"Waiting room"},
		Description: "A JWK Set (RFC 7517) of Ed25519 keys (kty OKP, alg EdDSA). An admission token is a JWT signed with " +
			"EdDSA whose kid names its key here; its claims are jti, sub (the buyer), event_id, cell, iat and exp. An edge " +
			"worker or CDN that keeps this set verifies admission tokens without any secret. Public; no authentication.",
	}, h.getAdmissionKeys)
}
