package controller

import (
	"sync"
	"time"
)

// queue is a work queue of keys with the guarantees level-based reconcilers need: a key waiting
// more than once is processed once, a key is never processed by two workers at the same time, and
// a key added while it is being processed is processed again afterwards. Keys can be added after a
// delay, and failing keys back off exponentially.
type queue struct {
	mu         sync.Mutex
	cond       *sync.Cond
	order      []string
	waiting    map[string]bool // in order, not yet taken
	processing map[string]bool
	dirty      map[string]bool // added while processing
	timers     map[string]*time.Timer
	due        map[string]time.Time
	failures   map[string]int
	shutdown   bool

	baseDelay, maxDelay time.Duration
}

func newQueue(baseDelay, maxDelay time.Duration) *queue {
	q := &queue{
		waiting: map[string]bool{}, processing: map[string]bool{}, dirty: map[string]bool{},
		timers: map[string]*time.Timer{}, due: map[string]time.Time{}, failures: map[string]int{},
		baseDelay: baseDelay, maxDelay: maxDelay,
	}
	q.cond = sync.NewCond(&q.mu)
	return q
}

// Add queues key now.
func (q *queue) Add(key string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.addLocked(key)
}

func (q *queue) addLocked(key string) {
	if q.shutdown {
		return
	}
	if q.processing[key] {
		q.dirty[key] = true
		return
	}
	if q.waiting[key] {
		return
	}
	q.waiting[key] = true
	q.order = append(q.order, key)
	q.cond.Signal()
}

// AddAfter queues key after d. If key is already due sooner, the earlier time wins.
func (q *queue) AddAfter(key string, d time.Duration) {
	if d <= 0 {
		q.Add(key)
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.shutdown || q.waiting[key] {
		return
	}
	due := time.Now().Add(d)
	if t, ok := q.timers[key]; ok {
		if !q.due[key].After(due) {
			return // already due no later than asked
		}
		t.Stop()
	}
	q.due[key] = due
	q.timers[key] = time.AfterFunc(d, func() {
		q.mu.Lock()
		defer q.mu.Unlock()
		delete(q.timers, key)
		delete(q.due, key)
		q.addLocked(key)
	})
}

// Retry queues key after its next backoff delay and returns that delay.
func (q *queue) Retry(key string) time.Duration {
	q.mu.Lock()
	n := q.failures[key]
	q.failures[key] = n + 1
	q.mu.Unlock()
	d := q.baseDelay << min(n, 20)
	if d > q.maxDelay || d <= 0 {
		d = q.maxDelay
	}
	q.AddAfter(key, d)
	return d
}

// Forget resets key's backoff after a success.
func (q *queue) Forget(key string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	delete(q.failures, key)
}

// Get blocks until a key is ready or the queue shuts down (ok false).
func (q *queue) Get() (key string, ok bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.order) == 0 && !q.shutdown {
		q.cond.Wait()
	}
	if q.shutdown {
		return "", false
	}
	key = q.order[0]
	q.order = q.order[1:]
	delete(q.waiting, key)
	q.processing[key] = true
	return key, true
}

// Done marks key processed; if it was added meanwhile it is queued again.
func (q *queue) Done(key string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	delete(q.processing, key)
	if q.dirty[key] {
		delete(q.dirty, key)
		q.addLocked(key)
	}
}

// Len is how many keys wait.
func (q *queue) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.order)
}

// ShutDown wakes every Get and stops every timer.
func (q *queue) ShutDown() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.shutdown = true
	for _, t := range q.timers {
		t.Stop()
	}
	q.cond.Broadcast()
}
