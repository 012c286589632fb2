// A node-redisson (Redisson's RLock protocol for Node.js) process that the
// Go tests command line by line. Each command line is "TAG COMMAND ARGS...",
// each reply "TAG ok VALUES..." or "TAG err MESSAGE". Commands run
// concurrently: a lock that waits does not hold up the next command.
//
// Environment: REDIS_ADDRS (host:port[,host:port...]), REDIS_CLUSTER=1 for
// a Cluster, LOCK_WATCHDOG_MS (Redisson's lockWatchdogTimeout).
//
// A lock object (LOCK, any word) is one Redisson "thread": its hash field
// is <redisson id>:<its own uuid>, and locking it again re-enters.
'use strict';
const readline = require('node:readline');
const { Redisson } = require('node-redisson');

const addrs = (process.env.REDIS_ADDRS || '127.0.0.1:6379').split(',').map((a) => {
  const i = a.lastIndexOf(':');
  return { host: a.slice(0, i), port: Number(a.slice(i + 1)) };
});
const redis = process.env.REDIS_CLUSTER === '1'
  ? { clusters: addrs, options: {} }
  : { options: addrs[0] };
const redisson = new Redisson({
  redis,
  lockWatchdogTimeout: BigInt(process.env.LOCK_WATCHDOG_MS || '30000'),
});
const locks = new Map();

function lockOf(id, name) {
  let l = locks.get(id);
  if (!l) {
    l = redisson.getLock(name);
    locks.set(id, l);
  }
  return l;
}

// now is the wall clock in microseconds.
function now() {
  return Math.round((performance.timeOrigin + performance.now()) * 1000);
}

const commands = {
  // lock LOCK NAME: wait for the lock; replies with when it was taken.
  async lock(id, name) {
    await lockOf(id, name).lock();
    return [now()];
  },
  // trylock LOCK NAME: one attempt; replies true or false.
  async trylock(id, name) {
    return [await lockOf(id, name).tryLock(0)];
  },
  // unlock LOCK: replies with when the unlock was sent and answered.
  async unlock(id) {
    const l = locks.get(id);
    if (!l) throw new Error('no lock ' + id);
    const sent = now();
    await l.unlock();
    return [sent, now()];
  },
  // force LOCK NAME: forceUnlock; replies true when a lock was deleted.
  async force(id, name) {
    return [await lockOf(id, name).forceUnlock()];
  },
  // field LOCK NAME: the lock object's hash field.
  async field(id, name) {
    const l = lockOf(id, name);
    return [l.getClientName(l.clientId)];
  },
  // listening CHANNEL: how many of this process's waiters have their
  // handler on CHANNEL. node-redisson attaches it only once the server
  // confirmed the subscription, so a message published between the two
  // is lost to the waiter: PUBSUB NUMSUB alone does not tell it listens.
  async listening(channel) {
    return [redisson.commandExecutor.eventEmitter.listenerCount(channel)];
  },
  // pttl NAME, hget NAME FIELD: what this process reads of the lock.
  async pttl(name) {
    return [await redisson.redis.pttl(name)];
  },
  async hget(name, field) {
    return [String(await redisson.redis.hget(name, field))];
  },
  // count LOCK NAME COUNTER INSIDE N: N times, take the lock, add one to
  // COUNTER by a read and a write, and count the times INSIDE showed
  // another holder inside; replies with that count.
  async count(id, name, counter, inside, n) {
    const l = lockOf(id, name);
    let overlaps = 0;
    for (let i = 0; i < Number(n); i++) {
      await l.lock();
      if ((await redisson.redis.incr(inside)) !== 1) overlaps++;
      const v = Number((await redisson.redis.get(counter)) || '0');
      await new Promise((r) => setImmediate(r));
      await redisson.redis.set(counter, String(v + 1));
      await redisson.redis.decr(inside);
      await l.unlock();
    }
    return [overlaps];
  },
  async quit() {
    await redisson.quit();
    setImmediate(() => process.exit(0));
    return [];
  },
};

const rl = readline.createInterface({ input: process.stdin });
rl.on('line', (line) => {
  const [tag, cmd, ...args] = line.trim().split(/\s+/);
  if (!tag) return;
  const f = commands[cmd];
  if (!f) {
    console.log(`${tag} err unknown command ${cmd}`);
    return;
  }
  f(...args).then(
    (vals) => console.log([tag, 'ok', ...vals].join(' ')),
    (e) => console.log(`${tag} err ${String(e && e.message ? e.message : e).replace(/\s+/g, ' ')}`),
  );
});
rl.on('close', () => {
  redisson.quit().finally(() => process.exit(0));
});
console.log('ready');
