package redisync

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/redis/rueidis"

	"github.com/redisync/redisync/internal/faultproxy"
)

// The register model of TestFencedLinearizable. A register is one key
// written with FencedSet and read with HMGET; its state is the value and
// the token of the last accepted write (initially "" and 0). A write
// carries a token:
//
//   - it is accepted (FencedSet returns nil) only if its token is at least
//     the state's token, and then the state becomes its value and token;
//   - it is refused (ErrStaleToken) only if its token is below the state's,
//     and the state stays;
//   - a write whose outcome the writer did not learn (an error from Redis or
//     the connection) may have been applied or not: the model allows both,
//     and the operation may take effect until the end of the history.
//
// A read returns the state. Fencing is in the model: a history in which a
// write with a token below an accepted one's succeeds after it, or a write
// is refused while no higher token had been accepted, is not linearizable.
type regInput struct {
	key   int
	write bool
	value string
	token uint64
}

type regOutput struct {
	status string // write: "ok", "stale" or "unknown"; read: "ok"
	value  string
	token  uint64
}

type regState struct {
	value string
	token uint64
}

var registerModel = porcupine.NondeterministicModel{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[int][]porcupine.Operation{}
		for _, op := range history {
			k := op.Input.(regInput).key
			byKey[k] = append(byKey[k], op)
		}
		var out [][]porcupine.Operation
		for _, ops := range byKey {
			out = append(out, ops)
		}
		return out
	},
	Init: func() []any { return []any{regState{}} },
	Step: func(state, input, output any) []any {
		st, in, out := state.(regState), input.(regInput), output.(regOutput)
		next := regState{in.value, in.token}
		switch {
		case !in.write:
			if out.value == st.value && out.token == st.token {
				return []any{st}
			}
			return nil
		case out.status == "ok":
			if in.token >= st.token {
				return []any{next}
			}
			return nil
		case out.status == "stale":
			if in.token < st.token {
				return []any{st}
			}
			return nil
		default: // unknown
			if in.token >= st.token {
				return []any{st, next}
			}
			return []any{st}
		}
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(regInput), output.(regOutput)
		if in.write {
			return fmt.Sprintf("set(%d, %s, token %d) -> %s", in.key, in.value, in.token, out.status)
		}
		return fmt.Sprintf("get(%d) -> %s, token %d", in.key, out.value, out.token)
	},
	DescribeState: func(state any) string {
		st := state.(regState)
		return fmt.Sprintf("%s, token %d", st.value, st.token)
	},
}

// history collects the operations of TestFencedLinearizable.
type history struct {
	start time.Time
	mu    sync.Mutex
	ops   []porcupine.Operation
	late  map[string]int // writes of holders whose lease was lost, by outcome
	// refused: writes refused as stale from a lease seen held from before
	// the write until after it, with no fault near.
	refused []string
}

func (h *history) now() int64 { return time.Since(h.start).Nanoseconds() }

func (h *history) add(client int, in regInput, call int64, out regOutput) {
	ret := h.now()
	if out.status == "unknown" {
		ret = math.MaxInt64 // it may take effect at any time after its call
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ops = append(h.ops, porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret})
}

// TestFencedLinearizable: writers that hold a Mutex lease write a register
// with FencedSet and their lease's token, some of them long after their
// lease may have been lost, while readers read it, under the faults of
// TestSchedule. The history must be linearizable for the register model
// above (checked with porcupine), and no write may be accepted with a token
// below one accepted before it began, nor be refused as stale while its
// lease was seen held with no fault near; the writers' leases must obey
// the lock model (lockmodel_test.go). Replay with -seed or REDISYNC_SEED,
// as for TestSchedule; REDISYNC_SOAK=1 runs it for 3 minutes instead of 15s.
func TestFencedLinearizable(t *testing.T) {
	seed := testSeed(t, "TestFencedLinearizable")
	e := ownServer(t, "--appendonly", "yes", "--appendfsync", "no")
	noLeak := leakCheck(t)
	rnd := rand.New(rand.NewPCG(seed, 0x11e))
	run := 15 * time.Second
	if os.Getenv("REDISYNC_SOAK") != "" {
		run = 3 * time.Minute
	}
	const registers = 3
	regKey := func(i int) string { return "lin:reg:" + strconv.Itoa(i) }

	w := &world{t: t, e: e, begin: time.Now(), faultCount: map[string]int{}}
	var passedOn atomic.Int64 // writers' leases passed on locally
	var clients []*schedClient
	for i := range 4 {
		sc := &schedClient{i: i, watchdog: []time.Duration{1500 * time.Millisecond, 3 * time.Second, 30 * time.Second}[rnd.IntN(3)]}
		addr := e.server.Addr
		if i >= 2 {
			p, err := faultproxy.New(addr)
			if err != nil {
				t.Fatal(err)
			}
			sc.p, addr = proxySet{p}, p.Addr()
		}
		opts := []Option{WithPrefix("lin"), WithLogger(quietLogger()), WithWatchdogLease(sc.watchdog),
			WithMetrics(Metrics{PassedOn: func(string, string, time.Duration) { passedOn.Add(1) }})}
		var c *Client
		var err error
		if i == 1 {
			// New over a rueidis client whose replies are held back or
			// lost at times.
			if sc.rc, err = rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}}); err == nil {
				sc.rf = withReplyFaults(sc.rc)
				c, err = New(sc.rf, opts...)
			}
		} else {
			c, err = Dial(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: rnd.IntN(2) == 0}, opts...)
		}
		if err != nil {
			t.Fatal(err)
		}
		sc.c = c
		clients = append(clients, sc)
		t.Logf("c%d: watchdog %v, proxied %v, reply faults %v", i, sc.watchdog, sc.p != nil, sc.rf != nil)
	}
	reader, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: e.addrs, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}

	h := &history{start: time.Now(), late: map[string]int{}}
	w.lh = newLockHistory(w.begin)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	actor := 0
	for _, sc := range clients {
		// Three writers per Client: some of them meet on one register, and
		// the lock passes between them locally.
		for range 3 {
			actor++
			id, r := actor, rand.New(rand.NewPCG(rnd.Uint64(), uint64(actor)))
			wg.Add(1)
			go func() {
				defer wg.Done()
				for n := 0; ; n++ {
					select {
					case <-stop:
						return
					default:
					}
					fencedWriter(w, h, r, sc, id, n, regKey)
				}
			}()
		}
	}
	for range 2 {
		actor++
		id, r := actor, rand.New(rand.NewPCG(rnd.Uint64(), uint64(actor)))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				case <-time.After(time.Duration(5+r.IntN(20)) * time.Millisecond):
				}
				k := r.IntN(registers)
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				call := h.now()
				vals, err := reader.Do(ctx, reader.B().Hmget().Key(regKey(k)).Field("value", "token").Build()).ToArray()
				cancel()
				if err != nil || len(vals) != 2 {
					continue // a read that failed changed nothing
				}
				v, _ := vals[0].ToString()
				tok, _ := vals[1].ToString()
				token, _ := strconv.ParseUint(tok, 10, 64)
				h.add(id, regInput{key: k}, call, regOutput{status: "ok", value: v, token: token})
			}
		}()
	}
	faultsDone := make(chan struct{})
	go func() {
		defer close(faultsDone)
		w.injectFaults(rand.New(rand.NewPCG(rnd.Uint64(), 3)), clients, stop, "all")
	}()
	time.Sleep(run)
	close(stop)
	<-faultsDone
	wg.Wait()
	reader.Close()
	for _, sc := range clients {
		if sc.rf != nil {
			sc.rf.clear()
		}
		if err := sc.c.Close(); err != nil {
			t.Errorf("closing c%d: %v", sc.i, err)
		}
		if sc.rc != nil {
			sc.rc.Close()
		}
		if sc.p != nil {
			sc.p.Close()
		}
	}
	noLeak(nil, restartedServer)

	// No accepted write carries a token below one accepted before it began.
	var stale []string
	byKey := map[int][]porcupine.Operation{}
	writes := map[string]int{}
	for _, op := range h.ops {
		in := op.Input.(regInput)
		if in.write {
			byKey[in.key] = append(byKey[in.key], op)
			writes[op.Output.(regOutput).status]++
		} else {
			writes["read"]++
		}
	}
	for k, ops := range byKey {
		for _, wop := range ops {
			if wop.Output.(regOutput).status != "ok" {
				continue
			}
			for _, v := range ops {
				if v.Output.(regOutput).status == "ok" && v.Return < wop.Call && v.Input.(regInput).token > wop.Input.(regInput).token {
					stale = append(stale, fmt.Sprintf("register %d: %s accepted at %v..%v after %s returned at %v",
						k, registerModel.DescribeOperation(wop.Input, wop.Output), time.Duration(wop.Call), time.Duration(wop.Return),
						registerModel.DescribeOperation(v.Input, v.Output), time.Duration(v.Return)))
					break
				}
			}
		}
	}
	faults := map[string]int64{}
	for k, v := range w.faultCount {
		faults[k] = int64(v)
	}
	var sb strings.Builder
	writeCounts(&sb, "operations", toInt64(writes))
	writeCounts(&sb, "writes after the lease ended", toInt64(h.late))
	writeCounts(&sb, "faults", faults)
	fmt.Fprintf(&sb, "leases passed on locally (Metrics.PassedOn): %d\n", passedOn.Load())
	owns, _, _ := w.lh.counts()
	fmt.Fprintf(&sb, "lock model: %d ownerships checked; writes refused while their lease held: %d\n", owns, len(h.refused))
	t.Log(sb.String())
	if len(writes) == 0 || writes["ok"] == 0 || writes["read"] == 0 {
		t.Fatalf("seed %d: too few operations to check: %v", seed, writes)
	}
	for i, s := range stale {
		if i == 5 {
			break
		}
		t.Errorf("seed %d: stale write accepted: %s", seed, s)
	}
	for i, s := range h.refused {
		if i == 5 {
			break
		}
		t.Errorf("seed %d: write refused as stale while its lease held: %s", seed, s)
	}
	byKind := map[string][]string{}
	var kinds []string
	for _, v := range w.lh.check(restartsOf(w.faults), "fenced", seed) {
		if byKind[v.kind] == nil {
			kinds = append(kinds, v.kind)
		}
		byKind[v.kind] = append(byKind[v.kind], v.text)
	}
	for _, k := range kinds {
		vs := byKind[k]
		t.Errorf("seed %d: %s: %d, the first: %s", seed, k, len(vs), strings.Join(vs[:min(len(vs), 3)], "; "))
	}

	res, info := porcupine.CheckOperationsVerbose(registerModel.ToModel(), h.ops, time.Minute)
	switch res {
	case porcupine.Illegal:
		path := filepath.Join(os.TempDir(), fmt.Sprintf("redisync-fenced-%d.html", seed))
		if err := porcupine.VisualizePath(registerModel.ToModel(), info, path); err != nil {
			path = "(not written: " + err.Error() + ")"
		}
		t.Errorf("seed %d: the fenced register's history of %d operations is not linearizable; visualization: %s; replay: go test -race -run '^TestFencedLinearizable$' -seed %d .",
			seed, len(h.ops), path, seed)
	case porcupine.Unknown:
		t.Logf("seed %d: linearizability check of %d operations timed out", seed, len(h.ops))
	default:
		t.Logf("%d operations linearizable", len(h.ops))
	}
}

// fencedWriter locks a register's Mutex and writes the register a few times
// with the lease's token; sometimes it waits long enough first for the lease
// to be lost, and sometimes it writes again after Unlock with the old token.
//
// A write refused as stale while the lease was seen held (Err nil before
// it, Deadline still ahead after it) with no fault near is recorded in
// h.refused: a token above the lease's was accepted while it held.
func fencedWriter(w *world, h *history, rnd *rand.Rand, sc *schedClient, id, n int, regKey func(int) string) {
	// Mostly the Client's own register, so that its writers meet there
	// and pass the lock on locally.
	k := sc.i % 3
	if rnd.IntN(3) == 0 {
		k = rnd.IntN(3)
	}
	var opts []LockOption
	fixed := rnd.IntN(3) == 0
	if fixed {
		opts = append(opts, WithFixedLease([]time.Duration{700 * time.Millisecond, 2 * time.Second}[rnd.IntN(2)]))
	}
	if rnd.IntN(4) == 0 {
		opts = append(opts, WithLocalPasses(0, 0)) // every hand-off in Redis
	} else {
		opts = append(opts, WithLocalPasses([]int{2, 64}[rnd.IntN(2)], time.Second))
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(10+rnd.IntN(2000))*time.Millisecond)
	defer cancel()
	callAt := time.Now()
	l, err := sc.c.Mutex(regKey(k), opts...).Lock(ctx)
	if err != nil {
		return
	}
	token := l.Token()
	var life *leaseLife
	w.trackOwner(l, 1)
	if l.Err() == nil {
		life = w.lh.acquired(sc.i, token, fixed, callAt, time.Now(), []string{"mutex:" + regKey(k)}, nil)
	}
	write := func(late bool) {
		value := fmt.Sprintf("w%d.%d.%d", id, n, rnd.IntN(1000))
		in := regInput{key: k, write: true, value: value, token: token}
		wctx, wcancel := context.WithTimeout(context.Background(), 3*time.Second)
		w.lh.witness(life, l)
		callAt := time.Now()
		call := h.now()
		err := sc.c.FencedSet(wctx, regKey(k), value, token)
		wcancel()
		if errors.Is(err, ErrStaleToken) && !late {
			dl, ok := l.Deadline()
			now := time.Now()
			if near := w.faultsAround(callAt.Add(-3*time.Second), now, 0); ok && now.Before(dl) && near == "" {
				h.mu.Lock()
				h.refused = append(h.refused, fmt.Sprintf("c%d register %d token %d written %s..%s, lease deadline %s",
					sc.i, k, token, w.rel(callAt), w.rel(now), w.rel(dl)))
				h.mu.Unlock()
			}
		}
		out := regOutput{status: "ok"}
		switch {
		case errors.Is(err, ErrStaleToken):
			out.status = "stale"
		case err != nil:
			out.status = "unknown"
		}
		h.add(id, in, call, out)
		if late {
			h.mu.Lock()
			h.late[out.status]++
			h.mu.Unlock()
		}
	}
	for range 1 + rnd.IntN(3) {
		if rnd.IntN(8) == 0 {
			time.Sleep(time.Duration(300+rnd.IntN(1500)) * time.Millisecond)
		} else {
			time.Sleep(time.Duration(rnd.IntN(10)) * time.Millisecond)
		}
		write(l.Err() != nil)
	}
	uctx, ucancel := context.WithTimeout(context.Background(), 5*time.Second)
	_ = w.unlockLease(l, life, uctx)
	ucancel()
	if rnd.IntN(5) == 0 {
		time.Sleep(time.Duration(rnd.IntN(50)) * time.Millisecond)
		write(true)
	}
}

func toInt64(m map[string]int) map[string]int64 {
	out := make(map[string]int64, len(m))
	for k, v := range m {
		out[k] = int64(v)
	}
	return out
}
