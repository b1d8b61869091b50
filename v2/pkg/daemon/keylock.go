package daemon

import "sync"

// keyLock serialises operations on one pod interface (an ADD and a DEL of the
// same container racing) while different interfaces proceed in parallel.
type keyLock struct {
	mu    sync.Mutex
	locks map[string]*keyEntry
}

type keyEntry struct {
	mu   sync.Mutex
	refs int
}

func newKeyLock() *keyLock { return &keyLock{locks: map[string]*keyEntry{}} }

// lock locks key and returns the unlock function.
func (k *keyLock) lock(key string) func() {
	k.mu.Lock()
	e := k.locks[key]
	if e == nil {
		e = &keyEntry{}
		k.locks[key] = e
	}
	e.refs++
	k.mu.Unlock()
	e.mu.Lock()
	return func() { k.release(key, e) }
}

// tryLock locks key unless someone holds it.
func (k *keyLock) tryLock(key string) (func(), bool) {
	k.mu.Lock()
	e := k.locks[key]
	if e == nil {
		e = &keyEntry{}
		k.locks[key] = e
	}
	e.refs++
	k.mu.Unlock()
	if !e.mu.TryLock() {
		k.mu.Lock()
		e.refs--
		if e.refs == 0 {
			delete(k.locks, key)
		}
		k.mu.Unlock()
		return nil, false
	}
	return func() { k.release(key, e) }, true
}

func (k *keyLock) release(key string, e *keyEntry) {
	e.mu.Unlock()
	k.mu.Lock()
	e.refs--
	if e.refs == 0 {
		delete(k.locks, key)
	}
	k.mu.Unlock()
}
