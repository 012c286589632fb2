package redisync_test

import (
	"errors"
	"fmt"

	"github.com/redis/rueidis"

	"github.com/redisync/redisync"
)

// Readers on any number of Clients share the lock; a writer waits until
// the last of them leaves, and holds it alone.
func ExampleRWMutex() {
	a, _ := redisync.Dial(rueidis.ClientOption{InitAddress: []string{redisAddr()}})
	defer a.Close()
	b, _ := redisync.Dial(rueidis.ClientOption{InitAddress: []string{redisAddr()}})
	defer b.Close()
	ma, mb := a.RWMutex("example:catalog"), b.RWMutex("example:catalog")

	r1, _ := ma.RLock(ctx)
	r2, err := mb.RLock(ctx)
	fmt.Println("second reader:", err)
	st, _ := ma.Inspect(ctx)
	fmt.Println("readers:", st.Readers)

	_, err = mb.TryLock(ctx)
	fmt.Println("writer while reading:", errors.Is(err, redisync.ErrLocked))

	writer := mb.Acquire(ctx)
	r1.Unlock(ctx)
	r2.Unlock(ctx)
	w := <-writer
	fmt.Println("writer after the readers:", w.Err())
	w.Unlock(ctx)
	// Output:
	// second reader: <nil>
	// readers: 2
	// writer while reading: true
	// writer after the readers: <nil>
}

// A writer downgrades: it takes a read lease through its write lease's
// context (at once, even with other writers waiting), releases the write
// lease and goes on reading what it wrote, with no writer in between.
// Upgrading a read lease is refused instead of deadlocking.
func ExampleRWMutex_downgrade() {
	m := client().RWMutex("example:config")

	w, _ := m.Lock(ctx)
	// ... write ...
	r, err := m.RLock(w.Context())
	fmt.Println("downgraded:", err, r.Token() == w.Token())
	w.Unlock(ctx)
	st, _ := m.Inspect(ctx)
	fmt.Println("write locked:", st.WriteLocked, "readers:", st.Readers)

	_, err = m.Lock(r.Context())
	fmt.Println("upgrade:", errors.Is(err, redisync.ErrUpgrade))
	r.Unlock(ctx)
	// Output:
	// downgraded: <nil> true
	// write locked: false readers: 1
	// upgrade: true
}
