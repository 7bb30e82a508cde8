// Package verified remembers tokens that passed a verification, by their
// exact string, until each one's expiry, so that a token presented again
// is not verified again: bearer tokens on every poll, admission tokens on
// every hold. A hit answers exactly what verifying again would until the
// expiry read from the token's own verified payload; a token that did not
// verify is never put in.
package verified

import (
	"sync"
	"time"
)

// Max is how many tokens a Cache keeps; when full it forgets them all.
const Max = 100_000

// Cache maps verified tokens to what their verification returned. The
// zero value is not usable: call New. It is safe for concurrent use.
type Cache[V any] struct {
	mu sync.RWMutex
	m  map[string]entry[V]
}

type entry[V any] struct {
	v   V
	exp time.Time
}

// New returns an empty Cache.
func New[V any]() *Cache[V] { return &Cache[V]{m: map[string]entry[V]{}} }

// Get returns what token verified to, if it was put in and expires after now.
func (c *Cache[V]) Get(token string, now time.Time) (V, bool) {
	c.mu.RLock()
	e, ok := c.m[token]
	c.mu.RUnlock()
	if ok && now.Before(e.exp) {
		return e.v, true
	}
	var zero V
	return zero, false
}

// Put remembers that token verified to v until exp. A zero exp (a token
// without expiry) is not remembered.
func (c *Cache[V]) Put(token string, v V, exp time.Time) {
	if exp.IsZero() {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) >= Max {
		clear(c.m)
	}
	c.m[token] = entry[V]{v: v, exp: exp}
}

// Len is how many tokens are remembered.
func (c *Cache[V]) Len() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.m)
}
