// Package testkit holds helpers the module's tests share: a log capture
// that goroutines may write to while the test reads it, waits on what was
// written, and a check that no secret reached the logs.
//
// It is for tests only. It imports testing and testify, and production code
// must never import it: only _test.go files and test-helper packages (those
// named *test that themselves serve only tests, like
// payments/stripemocktest) may.
package testkit
