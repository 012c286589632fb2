package main

import (
	"context"
	"errors"
	"strconv"
	"strings"

	"github.com/redisync/redisync"
)

// redissonView is a lock in Redisson's RLock layout (RLock, RFencedLock,
// RFairLock): the hash NAME, one field per holder, UUID:THREADID -> hold
// count, written by Java's Redisson, node-redisson or a Go
// Client.RedissonLock.
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
	return append(fs, field{"waiters", strconv.Itoa(v.Waiters) + " in the fair queue"})
}

func (v *redissonView) row() watchRow {
	r := watchRow{holder: "(none)", holds: "-", ttl: "-", token: "-", waiting: strconv.Itoa(v.Waiters)}
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
	st, err := redisync.InspectRedissonLock(ctx, c.rc, name)
	if errors.Is(err, redisync.ErrWrongType) {
		return nil, nil
	}
	if err != nil || (!st.Locked && st.Waiters == 0) {
		return nil, err
	}
	v := &redissonView{Kind: "redisson", Holders: []redissonHolderView{}, TTLms: ttlMillis(st.TTL), Waiters: st.Waiters, Token: st.Token,
		keyed: keyed{redissonKeys(name, "redisson_lock_queue", "redisson_lock_timeout", "redisson_lock_token")}}
	for _, h := range st.Holders {
		v.Holders = append(v.Holders, redissonHolderView{Owner: h.Owner, clientRef: clientRef{ClientID: h.ClientID()}, Holds: h.Holds})
	}
	return v, nil
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
	st, err := redisync.InspectRedissonReadWriteLock(ctx, c.rc, name)
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
