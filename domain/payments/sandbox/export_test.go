package sandbox

// SetAttemptedFunc makes sb call f after it has recorded the outcome of
// each webhook delivery attempt. Call it before RunWebhookSender.
func SetAttemptedFunc(sb *Sandbox, f func(eventID string, delivered bool)) { sb.attemptedFunc = f }
