package consumers

import (
	"context"

	"boxoffice/domain/payments"
	"boxoffice/platform/bus"
	"boxoffice/platform/outbox"
)

// PaymentCommandsName is the durable name of the payments consumer.
const PaymentCommandsName = "payments"

// PaymentCommandsSubjects are the subjects the payments consumer reads: the
// saga's four commands to the payment provider.
func PaymentCommandsSubjects() []string {
	return bus.Subjects(outbox.AggregateOrder, outbox.TypePaymentAuthorizationRequested, outbox.TypeCaptureRequested,
		outbox.TypeAuthorizationCancelRequested, outbox.TypeRefundRequested)
}

// PaymentCommandsMaxDeliver is the payments consumer's MaxDeliver: with
// the default schedule (1s·n⁴ ±10%, at most 10 minutes) a command whose
// provider stays unreachable is retried for at least 27 hours before it
// is dead-lettered, so an outage of the provider, even a long one, is
// waited out rather than turned into dead letters; the
// PaymentCommandsRetrying alert fires after 15 minutes of it.
const PaymentCommandsMaxDeliver = 170

// PaymentCommandsConsumerConfig is the Config of the payments consumer: its
// name, its subjects, DoubleAck, since it moves money, and its day-long
// retry window (PaymentCommandsMaxDeliver). The caller adds the Logger,
// the Registerer and any tuning, and builds it with
// NewExternal(pool, js, cfg, PaymentCommandsFunc(commands)).
func PaymentCommandsConsumerConfig() Config {
	return Config{Name: PaymentCommandsName, FilterSubjects: PaymentCommandsSubjects(), DoubleAck: true,
		MaxDeliver: PaymentCommandsMaxDeliver}
}

// CodeCaptureFailed is payments.CodeCaptureFailed: the PaymentFailed code
// of a capture the provider refused.
const CodeCaptureFailed = payments.CodeCaptureFailed

// PaymentCommandsFunc is the ExternalFunc of the payments consumer: the
// payment policy is commands' (domain/payments.Commands: which call each
// command makes, with which idempotency key, and what a refusal means);
// this consumer only runs it. Call runs outside any transaction, and the
// payments.RecordFunc it returns runs in the inbox transaction. Its errors
// go through decide: a retryable provider error naks with backoff, a
// fault.Permanent one dead-letters the command.
func PaymentCommandsFunc(commands *payments.Commands) ExternalFunc {
	return func(ctx context.Context, ev outbox.Envelope) (HandlerFunc, error) {
		rec, err := commands.Call(ctx, ev)
		return HandlerFunc(rec), err // a nil RecordFunc is a nil HandlerFunc
	}
}
