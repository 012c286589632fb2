package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/rueidis"

	"github.com/redisync/redisync"
	"github.com/redisync/redisync/redisson"
)

// redissonView is a lock in Redisson's RLock layout (RLock, RFencedLock,
// RFairLock): the hash NAME, one field per holder, UUID:THREADID -> hold
// count, written by Java's Redisson, node-redisson or a Go
// Client.Lock.
type redissonView struct {
	keyed
	Kind    string               `json:"kind"` // "redisson"
	Holders []redissonHolderView `json:"holders"`
	TTLms   int64                `json:"ttl_ms"`
	Waiters int                  `json:"waiters"` // in a fair lock's queue
	Token   uint64               `json:"token"`   // the last RFencedLock token
}

type redissonHolderView struct {
	Owner string `json:"owner"` // UUID:THREADID
	clientRef
	Holds int `json:"holds"`
}

func (v *redissonView) title() string { return "redisson lock" }

func (v *redissonView) clients() []*clientRef {
	refs := make([]*clientRef, len(v.Holders))
	for i := range v.Holders {
		refs[i] = &v.Holders[i].clientRef
	}
	return refs
}

func (v *redissonView) fields() []field {
	var fs []field
	if len(v.Holders) == 0 {
		fs = append(fs, field{"holder", "none"})
	}
	for _, h := range v.Holders {
		fs = append(fs, field{"holder", h.Owner}, field{"client", h.who()}, field{"holds", strconv.Itoa(h.Holds)})
	}
	fs = append(fs, field{"ttl", formatTTL(v.TTLms)})
	if v.Token > 0 {
		fs = append(fs, field{"token", strconv.FormatUint(v.Token, 10) + " (the last one given out)"})
	}
	return append(fs, field{"waiters", v.waiters()})
}

// waiters says who waits: a fair lock's queue; an RLock has no queue, and
// nothing in Redis records its waiters.
func (v *redissonView) waiters() string {
	if v.Waiters == 0 {
		return "not recorded (no queue: an RLock, or a fair lock nobody queues for)"
	}
	return strconv.Itoa(v.Waiters) + " in the fair queue"
}

func (v *redissonView) row() watchRow {
	r := watchRow{holder: "(none)", holds: "-", ttl: "-", token: "-", waiting: "-"} // an RLock's waiters are not recorded
	if v.Waiters > 0 {
		r.waiting = strconv.Itoa(v.Waiters)
	}
	if len(v.Holders) > 0 {
		r.holder, r.holds, r.ttl = v.Holders[0].who(), strconv.Itoa(v.Holders[0].Holds), formatTTL(v.TTLms)
	}
	if v.Token > 0 {
		r.token = strconv.FormatUint(v.Token, 10)
	}
	return r
}

// lookRedisson reads the Redisson lock named name. A key of another type
// or layout under that name is no Redisson lock: nothing to show.
func lookRedisson(ctx context.Context, c *client, name string) (kind, error) {
	st, err := redisson.InspectLock(ctx, c.rc, name)
	if errors.Is(err, redisync.ErrWrongType) {
		return nil, nil
	}
	if err != nil || (!st.Locked && st.Waiters == 0) {
		return nil, err
	}
	keys, err := existing(ctx, c, redissonKeys(name, "redisson_lock_queue", "redisson_lock_timeout", "redisson_lock_token"))
	if err != nil {
		return nil, err
	}
	v := &redissonView{Kind: "redisson", Holders: []redissonHolderView{}, TTLms: ttlMillis(st.TTL), Waiters: st.Waiters, Token: st.Token,
		keyed: keyed{keys}}
	for _, h := range st.Holders {
		v.Holders = append(v.Holders, redissonHolderView{Owner: h.Owner, clientRef: clientRef{ClientID: h.ClientID()}, Holds: h.Holds})
	}
	return v, nil
}

// existing returns those of keys that exist, in order.
func existing(ctx context.Context, c *client, keys []string) ([]string, error) {
	cmds := make(rueidis.Commands, len(keys))
	for i, k := range keys {
		cmds[i] = c.rc.B().Exists().Key(k).Build()
	}
	var out []string
	for i, r := range c.rc.DoMulti(ctx, cmds...) {
		n, err := r.AsInt64()
		if err != nil {
			return nil, fmt.Errorf("inspect %s: %w", keys[i], err)
		}
		if n > 0 {
			out = append(out, keys[i])
		}
	}
	return out, nil
}

// redissonHeldBy says who holds a Redisson lock, by its fields (a Redisson
// holder has no token).
func redissonHeldBy(k kind) string {
	switch v := k.(type) {
	case *redissonView:
		if len(v.Holders) > 0 {
			return "held by " + v.Holders[0].Owner
		}
	case *redissonRWView:
		switch {
		case v.Writer != nil && len(v.Readers) > 0:
			return fmt.Sprintf("write-held by %s, and %s", v.Writer.Owner, plural(len(v.Readers), "reader"))
		case v.Writer != nil:
			return "write-held by " + v.Writer.Owner
		case len(v.Readers) > 0:
			return "held by " + plural(len(v.Readers), "reader")
		}
	}
	return "held"
}

// redissonRWView is a lock in Redisson's RReadWriteLock layout: the hash
// NAME with its mode, reader fields UUID:THREADID and the writer field
// UUID:THREADID:write.
type redissonRWView struct {
	keyed
	Kind    string               `json:"kind"` // "redisson-rw"
	Mode    string               `json:"mode"` // "read" or "write"
	Readers []redissonHolderView `json:"readers"`
	Writer  *redissonHolderView  `json:"writer,omitempty"`
	TTLms   int64                `json:"ttl_ms"`
}

func (v *redissonRWView) title() string { return "redisson read-write lock" }

func (v *redissonRWView) clients() []*clientRef {
	refs := make([]*clientRef, 0, len(v.Readers)+1)
	for i := range v.Readers {
		refs = append(refs, &v.Readers[i].clientRef)
	}
	if v.Writer != nil {
		refs = append(refs, &v.Writer.clientRef)
	}
	return refs
}

func (v *redissonRWView) fields() []field {
	fs := []field{{"mode", v.Mode}}
	if v.Writer != nil {
		fs = append(fs, field{"writer", v.Writer.Owner}, field{"client", v.Writer.who()}, field{"holds", strconv.Itoa(v.Writer.Holds)})
	}
	for _, h := range v.Readers {
		fs = append(fs, field{"reader", h.Owner}, field{"client", h.who()}, field{"holds", strconv.Itoa(h.Holds)})
	}
	return append(fs, field{"ttl", formatTTL(v.TTLms)})
}

func (v *redissonRWView) row() watchRow {
	r := watchRow{holder: strconv.Itoa(len(v.Readers)) + " readers", holds: "-", ttl: formatTTL(v.TTLms), token: "-", waiting: "-"}
	if v.Writer != nil {
		r.holder, r.holds = v.Writer.who(), strconv.Itoa(v.Writer.Holds)
	}
	return r
}

// lookRedissonRW reads the Redisson read-write lock named name. A key of
// another type or layout under that name is none: nothing to show.
func lookRedissonRW(ctx context.Context, c *client, name string) (kind, error) {
	st, err := redisson.InspectReadWriteLock(ctx, c.rc, name)
	if errors.Is(err, redisync.ErrWrongType) {
		return nil, nil
	}
	if err != nil || st.Mode == "" {
		return nil, err
	}
	v := &redissonRWView{Kind: "redisson-rw", Mode: st.Mode, Readers: []redissonHolderView{}, TTLms: ttlMillis(st.TTL),
		keyed: keyed{redissonKeys(name)}}
	for _, h := range st.Readers {
		v.Readers = append(v.Readers, redissonHolderView{Owner: h.Owner, clientRef: clientRef{ClientID: h.ClientID()}, Holds: h.Holds})
	}
	if st.Writer.Holds > 0 {
		v.Writer = &redissonHolderView{Owner: st.Writer.Owner, clientRef: clientRef{ClientID: st.Writer.ClientID()}, Holds: st.Writer.Holds}
	}
	return v, nil
}

// redissonKeys are the keys of a Redisson lock named name: the name itself,
// and each of kinds with the name as Redisson tags it ("KIND:{NAME}", or
// "KIND:NAME" for a name that holds a brace, as Java's Redisson writes it).
func redissonKeys(name string, kinds ...string) []string {
	tagged := "{" + name + "}"
	if strings.Contains(name, "{") {
		tagged = name
	}
	keys := []string{name}
	for _, k := range kinds {
		keys = append(keys, k+":"+tagged)
	}
	return keys
}

// The Redisson objects --redisson names. Redisson keeps an RSemaphore's
// permits, an RPermitExpirableSemaphore's available permits and an
// RCountDownLatch's count in a plain string NAME holding a number, which
// any program's counter could be too: nothing in Redis tells them apart,
// so inspect reads NAME as one of them only when told which. An
// RPermitExpirableSemaphore with permits acquired is found without being
// named: its zset {NAME}:timeout of 16-byte permit ids is its own.
const (
	asSemaphore = "semaphore"
	asPSem      = "permit-expirable-semaphore"
	asLatch     = "latch"
)

// checkRedissonAs checks the value of --redisson.
func checkRedissonAs(as string) error {
	switch as {
	case "", asSemaphore, asPSem, asLatch:
		return nil
	}
	return usageErrorf("--redisson must be %s, %s or %s, got %q", asSemaphore, asPSem, asLatch, as)
}

// redissonAsFlag is the help of --redisson.
const redissonAsFlag = "read the string NAME as the Redisson object of this `kind`: " + asSemaphore + ", " + asPSem + " or " + asLatch

// redissonSemView is a semaphore in Redisson's RSemaphore layout: the
// string NAME, the permits available.
type redissonSemView struct {
	keyed
	Kind      string `json:"kind"` // "redisson-semaphore"
	Available int64  `json:"available"`
	TTLms     int64  `json:"ttl_ms"`
}

func (v *redissonSemView) title() string         { return "redisson semaphore" }
func (v *redissonSemView) clients() []*clientRef { return nil }

func (v *redissonSemView) fields() []field {
	return []field{
		{"available", strconv.FormatInt(v.Available, 10) + " permits (holders are not recorded)"},
		{"ttl", formatTTL(v.TTLms)},
	}
}

func (v *redissonSemView) row() watchRow {
	return watchRow{holder: strconv.FormatInt(v.Available, 10) + " available", holds: "-", ttl: formatTTL(v.TTLms), token: "-", waiting: "-"}
}

// redissonLatchView is a count-down latch in Redisson's RCountDownLatch
// layout: the string NAME, the count.
type redissonLatchView struct {
	keyed
	Kind  string `json:"kind"` // "redisson-latch"
	Count int64  `json:"count"`
	TTLms int64  `json:"ttl_ms"`
}

func (v *redissonLatchView) title() string         { return "redisson count-down latch" }
func (v *redissonLatchView) clients() []*clientRef { return nil }

func (v *redissonLatchView) fields() []field {
	return []field{
		{"count", strconv.FormatInt(v.Count, 10) + " (closed: waiters wait until it is 0)"},
		{"ttl", formatTTL(v.TTLms)},
	}
}

func (v *redissonLatchView) row() watchRow {
	return watchRow{holder: "count " + strconv.FormatInt(v.Count, 10), holds: "-", ttl: formatTTL(v.TTLms), token: "-", waiting: "-"}
}

// redissonPSemView is a semaphore in Redisson's RPermitExpirableSemaphore
// layout: the string NAME, the permits available, and the zset
// {NAME}:timeout of the permits acquired.
type redissonPSemView struct {
	keyed
	Kind      string              `json:"kind"` // "redisson-permit-expirable-semaphore"
	Available int64               `json:"available"`
	Acquired  int                 `json:"acquired"`
	Permits   []redissonPermitRef `json:"permits"`
	TTLms     int64               `json:"ttl_ms"`
}

// redissonPermitRef is one acquired permit.
type redissonPermitRef struct {
	ID string `json:"id"` // 32 hex digits, as Java shows it
	// LeaseMs is what is left of its lease; -1 for a permit without lease.
	LeaseMs int64 `json:"lease_ms"`
	// Expired: its lease is over, and the next operation on the semaphore
	// gives it back.
	Expired bool `json:"expired"`
}

func (v *redissonPSemView) title() string         { return "redisson permit-expirable semaphore" }
func (v *redissonPSemView) clients() []*clientRef { return nil }

func (p redissonPermitRef) lease() string {
	switch {
	case p.LeaseMs == -1:
		return "no lease"
	case p.Expired:
		return "expired, given back by the next operation"
	}
	return "lease " + formatTTL(p.LeaseMs)
}

func (v *redissonPSemView) fields() []field {
	fs := []field{
		{"available", strconv.FormatInt(v.Available, 10)},
		{"acquired", strconv.Itoa(v.Acquired)},
	}
	for _, p := range v.Permits {
		fs = append(fs, field{"", p.ID + "  " + p.lease()})
	}
	return append(fs, field{"ttl", formatTTL(v.TTLms)})
}

func (v *redissonPSemView) row() watchRow {
	r := watchRow{holder: fmt.Sprintf("%d acquired, %d available", v.Acquired, v.Available), holds: "-", ttl: "-", token: "-", waiting: "-"}
	if len(v.Permits) > 0 {
		// The nearest expiry.
		switch p := v.Permits[0]; {
		case p.LeaseMs == -1:
			r.ttl = "no lease"
		case p.Expired:
			r.ttl = "expired"
		default:
			r.ttl = formatTTL(p.LeaseMs)
		}
	}
	return r
}

// lookRedissonPSem reads the Redisson permit expirable semaphore named
// name: shown when permits are acquired, or, when named (--redisson
// permit-expirable-semaphore), whenever NAME exists. Unless named, keys
// of another type or layout are no such semaphore: nothing to show.
func lookRedissonPSem(ctx context.Context, c *client, name string, named bool) (kind, error) {
	st, err := redisson.InspectPermitExpirableSemaphore(ctx, c.rc, name)
	switch {
	case errors.Is(err, redisync.ErrWrongType) && !named:
		return nil, nil
	case err != nil:
		return nil, notA(name, "permit expirable semaphore", err)
	case len(st.Permits) == 0 && !(named && st.Exists):
		return nil, nil
	}
	v := &redissonPSemView{Kind: "redisson-permit-expirable-semaphore", Available: st.Available, Acquired: len(st.Permits),
		Permits: []redissonPermitRef{}, TTLms: ttlMillis(st.TTL), keyed: keyed{redissonSuffixed(name, "timeout")}}
	for _, p := range st.Permits {
		r := redissonPermitRef{ID: p.ID, LeaseMs: ttlMillis(p.Lease), Expired: p.Expired}
		if p.Lease == redisson.NoLease {
			r.LeaseMs = -1
		} else if p.Expired {
			r.LeaseMs = 0
		}
		v.Permits = append(v.Permits, r)
	}
	return v, nil
}

// lookRedissonString reads the string NAME as the Redisson object as
// names (asSemaphore or asLatch): shown when NAME exists (a latch: when
// its count is not zero). A key that is not a number is an error then.
// With as "" it only reads NAME into plain, for the note that says it may
// be one.
func lookRedissonString(ctx context.Context, c *client, name, as string, plain *redisson.SemaphoreState) (kind, error) {
	switch as {
	case "":
		st, err := redisson.InspectSemaphore(ctx, c.rc, name)
		if err == nil {
			*plain = st
		}
		return nil, nil
	case asSemaphore:
		st, err := redisson.InspectSemaphore(ctx, c.rc, name)
		if err != nil {
			return nil, notA(name, "semaphore", err)
		}
		if !st.Exists {
			return nil, nil
		}
		return &redissonSemView{Kind: "redisson-semaphore", Available: st.Available, TTLms: ttlMillis(st.TTL), keyed: keyed{[]string{name}}}, nil
	case asLatch:
		st, err := redisson.InspectCountDownLatch(ctx, c.rc, name)
		if err != nil {
			return nil, notA(name, "count-down latch", err)
		}
		if st.Count == 0 {
			return nil, nil
		}
		return &redissonLatchView{Kind: "redisson-latch", Count: st.Count, TTLms: ttlMillis(st.TTL), keyed: keyed{[]string{name}}}, nil
	}
	return nil, nil
}

// notA says that name is not the Redisson object what when err is
// ErrWrongType, and returns other errors as they are.
func notA(name, what string, err error) error {
	if errors.Is(err, redisync.ErrWrongType) {
		return fmt.Errorf("%q is not a Redisson %s: %w", name, what, err)
	}
	return err
}

// redissonSuffixed are the keys NAME and, for each suffix, the key Java's
// Redisson names "{NAME}:SUFFIX" (or "NAME:SUFFIX" for a name that holds a
// brace: RedissonObject.suffixName).
func redissonSuffixed(name string, suffixes ...string) []string {
	tagged := "{" + name + "}"
	if strings.Contains(name, "{") {
		tagged = name
	}
	keys := []string{name}
	for _, s := range suffixes {
		keys = append(keys, tagged+":"+s)
	}
	return keys
}
