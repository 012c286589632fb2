package redisync

import (
	"context"
	"crypto/tls"
	"net"
	"time"

	"github.com/redis/rueidis"

	"github.com/redisync/redisync/internal/faultproxy"
)

// proxySet is the fault proxies of one Client of TestSchedule: one in
// front of each server that holds data (the standalone server, or each
// master of the Cluster), or none for a direct Client. A fault acts on
// every proxy of the set at once (pause-conn: on one connection of one
// of them).
type proxySet []*faultproxy.Proxy

// newProxySet starts a fault proxy in front of each of addrs.
func newProxySet(addrs []string) (proxySet, error) {
	var ps proxySet
	for _, a := range addrs {
		p, err := faultproxy.New(a)
		if err != nil {
			ps.Close()
			return nil, err
		}
		ps = append(ps, p)
	}
	return ps, nil
}

// option returns the rueidis option of a Client of the servers at addrs
// (the proxies' targets, in order) whose connections go through the set:
// every address the Client dials, those a Cluster names included, is
// replaced by its proxy's.
func (ps proxySet) option(addrs []string) rueidis.ClientOption {
	opt := rueidis.ClientOption{InitAddress: addrs}
	if ps == nil {
		return opt
	}
	via := map[string]string{}
	for i, p := range ps {
		via[addrs[i]] = p.Addr()
	}
	opt.DialCtxFn = func(ctx context.Context, dst string, d *net.Dialer, _ *tls.Config) (net.Conn, error) {
		if a, ok := via[dst]; ok {
			dst = a
		}
		return d.DialContext(ctx, "tcp", dst)
	}
	return opt
}

// connsPerProxy numbers the connections of a set: Open's number of the
// i-th connection of the set's j-th proxy is j*connsPerProxy+i.
const connsPerProxy = 1 << 20

func (ps proxySet) Open() []int {
	var out []int
	for j, p := range ps {
		for _, i := range p.Open() {
			out = append(out, j*connsPerProxy+i)
		}
	}
	return out
}

func (ps proxySet) PauseConn(n int, d time.Duration) {
	ps[n/connsPerProxy].PauseConn(n%connsPerProxy, d)
}

func (ps proxySet) each(f func(p *faultproxy.Proxy)) {
	for _, p := range ps {
		f(p)
	}
}

func (ps proxySet) Pause(d time.Duration) { ps.each(func(p *faultproxy.Proxy) { p.Pause(d) }) }
func (ps proxySet) SetLatency(d time.Duration) {
	ps.each(func(p *faultproxy.Proxy) { p.SetLatency(d) })
}
func (ps proxySet) DropPushes(n int) { ps.each(func(p *faultproxy.Proxy) { p.DropPushes(n) }) }
func (ps proxySet) DelayPushes(d time.Duration) {
	ps.each(func(p *faultproxy.Proxy) { p.DelayPushes(d) })
}
func (ps proxySet) CutSubscribers() { ps.each(func(p *faultproxy.Proxy) { p.CutSubscribers() }) }
func (ps proxySet) Heal()           { ps.each(func(p *faultproxy.Proxy) { p.Heal() }) }
func (ps proxySet) Close()          { ps.each(func(p *faultproxy.Proxy) { p.Close() }) }
