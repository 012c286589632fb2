package faultproxy_test

import (
	"context"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestPause(t *testing.T) {
	_, p := setup(t)
	a := dialRaw(t, p)
	requirePong(t, a)
	b := dialRaw(t, p)
	requirePong(t, b)

	require.True(t, p.PauseConn(0, 700*time.Millisecond))
	requireSilent(t, a) // held, not closed: the PONG comes after the pause
	requirePong(t, b)
	reply, err := a.ping(2 * time.Second) // the PONG held first, then this one's
	require.NoError(t, err)
	require.Equal(t, "+PONG", reply)
	requirePong(t, a)
	require.False(t, p.PauseConn(9, time.Second), "never accepted")

	p.Pause(time.Hour)
	requireSilent(t, b)
	p.Heal() // ends the pause, closes nothing
	reply, err = b.ping(2 * time.Second)
	require.NoError(t, err)
	require.Equal(t, "+PONG", reply)
	require.Equal(t, 2, p.Conns())
}

func TestPushFaults(t *testing.T) {
	srv, p := setup(t)
	sub := dialRaw(t, p)
	require.NoError(t, sub.SetDeadline(time.Now().Add(5*time.Second)))
	_, err := io.WriteString(sub, "HELLO 3\r\nSUBSCRIBE ch\r\n")
	require.NoError(t, err)
	// Reads RESP3 lines until one is want.
	await := func(want string, within time.Duration) error {
		require.NoError(t, sub.SetDeadline(time.Now().Add(within)))
		for {
			line, err := sub.r.ReadString('\n')
			if err != nil {
				return err
			}
			if line == want+"\r\n" {
				return nil
			}
		}
	}
	require.NoError(t, await("ch", 5*time.Second)) // the confirmation
	publish := func(msg string) {
		_, err := srv.Do("PUBLISH", "ch", msg)
		require.NoError(t, err)
	}

	p.DropPushes(2)
	publish("one")
	publish("two")
	publish("three")
	require.NoError(t, await("three", 2*time.Second))

	p.DelayPushes(600 * time.Millisecond)
	start := time.Now()
	publish("four")
	for p.Pushes().Delayed == 0 && time.Since(start) < 500*time.Millisecond {
		time.Sleep(time.Millisecond) // until the proxy has read it
	}
	require.Equal(t, 1, p.Pushes().Delayed)
	p.DelayPushes(0)
	publish("five") // queued behind "four"
	require.NoError(t, await("four", 3*time.Second))
	require.GreaterOrEqual(t, time.Since(start), 500*time.Millisecond)
	require.NoError(t, await("five", 2*time.Second))
	require.Equal(t, 2, p.Pushes().Dropped)

	// A large reply parsed in pieces goes through whole.
	rc := newClient(t, p)
	ctx := context.Background()
	big := make([]byte, 200<<10)
	for i := range big {
		big[i] = byte('a' + i%26)
	}
	require.NoError(t, rc.Do(ctx, rc.B().Set().Key("big").Value(string(big)).Build()).Error())
	got, err := rc.Do(ctx, rc.B().Get().Key("big").Build()).ToString()
	require.NoError(t, err)
	require.Equal(t, string(big), got)

	other := dialRaw(t, p)
	requirePong(t, other)
	require.Equal(t, 1, p.CutSubscribers(), fmt.Sprint(p.Open()))
	_, err = sub.r.ReadString('\n')
	require.Error(t, err)
	requirePong(t, other)
}
