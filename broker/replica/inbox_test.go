package replica

import (
	"testing"
	"time"

	"felix.dev/felix/broker/replication"
)

// The inbox keeps the order of events, holds at most inboxSize (a sender
// then waits until the run loop takes them, or until stop or cancel), and
// gives up a buffer far larger than its use (issue 31).
func TestInbox(t *testing.T) {
	in := newInbox()
	never := make(chan struct{})
	for i := 0; i < inboxSize; i++ {
		if !in.put(&event{epoch: uint64(i)}, never, nil) {
			t.Fatal("put refused with room")
		}
	}
	select {
	case <-in.ready:
	default:
		t.Fatal("no ready signal")
	}

	// Full: a put waits for a take, and a stop or cancel ends the wait.
	cancel := make(chan struct{})
	refused := make(chan bool)
	go func() { refused <- !in.put(&event{}, never, cancel) }()
	select {
	case <-refused:
		t.Fatal("put into a full inbox did not wait")
	case <-time.After(20 * time.Millisecond):
	}
	close(cancel)
	if !<-refused {
		t.Fatal("cancelled put queued its event")
	}
	queued := make(chan bool)
	go func() { queued <- in.put(&event{epoch: inboxSize}, never, nil) }()
	time.Sleep(10 * time.Millisecond)
	evs := in.take()
	if len(evs) != inboxSize {
		t.Fatalf("took %d events, want %d", len(evs), inboxSize)
	}
	for i := range evs {
		if evs[i].epoch != uint64(i) {
			t.Fatalf("event %d is %d: out of order", i, evs[i].epoch)
		}
	}
	if !<-queued {
		t.Fatal("waiting put refused after a take")
	}
	in.recycle(evs)
	if evs := in.take(); len(evs) != 1 || evs[0].epoch != inboxSize {
		t.Fatalf("after the take: %v", evs)
	} else {
		in.recycle(evs)
	}

	// Large buffers used little are dropped after inboxShrinkAfter takes
	// of them (the two buffers alternate).
	for i := 0; i < 2*inboxShrinkAfter+2; i++ {
		in.put(&event{}, never, nil)
		in.recycle(in.take())
	}
	if cq, cs := cap(in.q), cap(in.spare); cq > inboxKeep || cs > inboxKeep {
		t.Fatalf("buffers keep capacities %d and %d", cq, cs)
	}
}

// Only the put that finds the inbox empty signals: the events behind it
// are taken with it, and no signal is left over for an empty take (issue
// 31). A put after the take signals again.
func TestInboxSignalsOncePerTake(t *testing.T) {
	in := newInbox()
	never := make(chan struct{})
	for i := 0; i < 3; i++ {
		in.put(&event{epoch: uint64(i)}, never, nil)
		if i == 0 {
			select {
			case <-in.ready:
			default:
				t.Fatal("the first put did not signal")
			}
		}
	}
	select {
	case <-in.ready:
		t.Fatal("a put into a non-empty inbox signalled")
	default:
	}
	evs := in.take()
	if len(evs) != 3 {
		t.Fatalf("took %d events, want 3", len(evs))
	}
	in.recycle(evs)
	in.put(&event{}, never, nil)
	select {
	case <-in.ready:
	default:
		t.Fatal("a put into the emptied inbox did not signal")
	}
}

// One clock gives every shard its ticks; a shard that has not taken its
// tick is not waited for, and a removed shard gets none.
func TestPassClock(t *testing.T) {
	var c passClock
	c.start(time.Millisecond)
	defer c.stop()
	a, b := clockOnlyShard(), clockOnlyShard()
	c.add(a)
	c.add(b)
	for i := 0; i < 3; i++ {
		select {
		case <-a.tick:
		case <-time.After(time.Second):
			t.Fatal("no tick")
		}
	}
	// b never took its tick: it holds one, and the clock went on.
	if len(b.tick) != 1 {
		t.Fatal("b holds no tick")
	}
	c.remove(a)
	time.Sleep(5 * time.Millisecond)
	select {
	case <-a.tick:
	default:
	}
	time.Sleep(5 * time.Millisecond)
	if len(a.tick) != 0 {
		t.Fatal("a removed shard got a tick")
	}
}

// The clock ticks leaders and recovering replicas, never followers (their
// core does nothing on a tick), and ticks a follower once it has
// published another role.
func TestPassClockSkipsFollowers(t *testing.T) {
	for _, tc := range []struct {
		role  replication.Role
		ticks bool
	}{
		{replication.RoleFollower, false},
		{replication.RoleRecovering, true},
		{replication.RoleLeader, true},
	} {
		t.Run(tc.role.String(), func(t *testing.T) {
			var c passClock
			c.start(time.Millisecond)
			defer c.stop()
			s, ref := clockOnlyShard(), clockOnlyShard()
			s.status.Store(&replication.Status{Role: tc.role})
			ref.status.Store(&replication.Status{Role: replication.RoleLeader})
			c.add(s)
			c.add(ref)
			// Three ticks of the reference shard: the clock went round
			// at least twice with s in it.
			for i := 0; i < 3; i++ {
				select {
				case <-ref.tick:
				case <-time.After(time.Second):
					t.Fatal("no tick for the leader")
				}
			}
			if got := len(s.tick) == 1; got != tc.ticks {
				t.Fatalf("%s holds a tick: %v, want %v", tc.role, got, tc.ticks)
			}
			s.status.Store(&replication.Status{Role: replication.RoleLeader})
			select {
			case <-s.tick:
			case <-time.After(time.Second):
				t.Fatal("no tick after the shard became leader")
			}
		})
	}
}

// clockOnlyShard is a shard with a tick channel and nothing to run: no
// core, no goroutine (exited), so the clock never drives it itself and
// every tick goes to its channel.
func clockOnlyShard() *shard {
	return &shard{tick: make(chan struct{}, 1), inbox: newInbox(), exited: true}
}
