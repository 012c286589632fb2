// Package redisson shares locks with Java and Node services: use it to
// share a lock with services that use Redisson (3.x, the Java client) or
// node-redisson, on the same Redis. It takes Redisson's locks,
// semaphores and latches in Redisson's own layout (its keys, fields,
// channels and messages), so that a Go service and a Java service exclude
// each other on one name and wake each other's waiters. Package
// redisync's own locks (Mutex, FairMutex, RWMutex, Semaphore, Latch) keep
// a layout of their own, which Java cannot read: between Go services, use
// them.
//
// A Client is made from a *redisync.Client, as a RedissonClient is made
// from a Config, and holds the settings its handles share; each handle is
// Java's object of the same name:
//
//	Java (Redisson)                              Go (this package)
//	RedissonClient r = Redisson.create(config)   r := redisson.New(c, opts...)
//	r.getLock(name).lock()                       l, err := r.Lock(name).Lock(ctx)
//	r.getLock(name).tryLock()                    l, err := r.Lock(name).TryLock(ctx)
//	r.getLock(name).lockAsync()                  ch := r.Lock(name).Acquire(ctx)
//	lock.lock(leaseTime, unit)                   r.Lock(name, redisson.WithLeaseTime(d)).Lock(ctx)
//	lock.unlock()                                l.Unlock(ctx)
//	lock.forceUnlock()                           r.Lock(name).ForceUnlock(ctx)
//	lock.isLocked(), getHoldCount()              r.Lock(name).Inspect(ctx)
//	r.getFencedLock(name).lockAndGetToken()      l, err := r.FencedLock(name).Lock(ctx); l.Token()
//	r.getFairLock(name)                          r.FairLock(name)
//	r.getReadWriteLock(name).readLock().lock()   r.ReadWriteLock(name).RLock(ctx)
//	r.getReadWriteLock(name).writeLock().lock()  r.ReadWriteLock(name).Lock(ctx)
//	r.getSemaphore(name).acquire(n)              r.Semaphore(name).Lock(ctx, n)
//	r.getPermitExpirableSemaphore(name)          r.PermitExpirableSemaphore(name)
//	r.getCountDownLatch(name).await()            r.CountDownLatch(name).Wait(ctx)
//	Config.lockWatchdogTimeout                   redisync.WithWatchdogLease(d), on the redisync.Client;
//	                                               per handle redisson.WithRenewedLease(d)
//	Config.fairLockWaitTimeout                   redisson.WithFairWait(d)
//	ClusterServersConfig.shardedSubscriptionMode redisson.WithPubSub(mode): default both ways
//
// Differences a Java developer trips on, side by side:
//
//	Java (Redisson)                              Go (this package)
//	lock.lockAsync(), semaphore.acquireAsync()   Acquire(ctx): it returns at once; the
//	  the future may be dropped                    Lease it delivers holds until Unlock, and
//	                                               one nobody received until ctx ends: a
//	                                               statement r.Lock(name).Acquire(ctx) holds
//	                                               the lock until ctx ends. Lock(ctx) waits.
//	RLock: the lock interface (getLock)          Lock; RLock(ctx) is the read side,
//	                                               r.ReadWriteLock(name).RLock(ctx), Java's
//	                                               readLock().lock()
//	fencedLock.lockAndGetToken() on re-entry     the counter is counted up as in Java, but
//	  returns the new, higher token                a re-entry's Lease.Token() is its outer
//	                                               Lease's token, the one the guarded
//	                                               resource has seen
//	rw.readLock() inside writeLock(), same       a read Lease taken with the write Lease's
//	  thread                                       Context
//	a thread owns the lock; unlock() from        a Lease owns it; l.Unlock(ctx) from any
//	  another thread is refused                    goroutine; re-entry through l.Context()
//	Thread.getId() in the field                  redisson.Owner(l) gives the field
//	getPermitExpirableSemaphore: acquire()       permits always carry a lease: the
//	  without leaseTime never expires              watchdog lease, renewed, or
//	                                               WithLeaseTime(d); a dead process's
//	                                               permits come back
//	getSemaphore: permits are nobody's, and      Semaphore's Lease holds them (Unlock gives
//	  anyone may release(n)                        them back, Close releases them); nothing
//	                                               in Redis records the holder, as in Java
//	lock(), await() until interrupted            Lock(ctx) until ctx ends: an error that
//	                                               names the lock and matches both ctx's
//	                                               error and redisync.ErrLocked; Wait(ctx):
//	                                               ctx's error, naming the latch
//	tryLock(): false                             TryLock(ctx): redisync.ErrLocked
//
// Ownership is a redisync.Lease, not a thread: the lock's field is
// UUID:THREADID, where UUID is the redisync Client's ID and THREADID a
// number the Client gives each ownership; re-entry goes through the
// lease's Context (Lock with l.Context() adds a hold), and Unlock may come
// from any goroutine. The Leases are held through the redisync Client's
// machinery: its watchdog renews them (a third of the lease, as
// Redisson's), its tracking reports them lost (Lost, Err), its Close
// releases them.
//
// With the defaults, Go and Java wake each other's waiters whichever way
// the Java fleet subscribes: a release publishes its message both ways,
// PUBLISH and SPUBLISH, wherever the servers have sharded pub/sub (Redis
// 7.0 or newer), and Go waiters listen both ways there (see PubSub). A
// Java fleet subscribes classically before Redisson 3.22.0, with
// shardedSubscriptionMode OFF, and on standalone Redis; sharded on a Cluster
// of Redis 7 otherwise; a message its waiters miss costs them the holder's
// whole remaining lease. Publishing both ways costs a release one more
// command inside its script, no round trip: measured on the 3-master
// Cluster of the tests (BenchmarkRedissonPubSubRelease, a Lock and its
// Unlock, CPU summed over the six nodes, which a classic PUBLISH reaches
// over the cluster bus), about 25 µs of server CPU more than sharded
// alone (about 160 against 135 µs per Lock and Unlock), and no latency
// that shows above the noise (0.23 to 0.25 ms per Lock and Unlock either
// way); on standalone about 1 µs. Asking Redis who listens instead
// (PUBSUB NUMSUB, SHARDNUMSUB) costs a round trip per release, and misses
// a waiter that subscribes after the question. WithPubSub narrows it to
// one way, for fleets that are known to listen that way; the Client then
// logs at WARN, once per object name, the waiters it cannot reach.
//
// Java wraps NAME in {...} in the names of channels and auxiliary keys
// unless NAME contains a '{' (RedissonObject.prefixName), and so does this
// package. On Cluster a NAME that contains '{' without a hash tag ("a{b")
// puts the lock and its channel in different slots: Redisson fails on it
// there, and this package rejects it (redisync.ErrInvalidArgument).
package redisson
