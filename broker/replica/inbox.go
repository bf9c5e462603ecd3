package replica

import "sync"

// inboxSize bounds the events waiting for one shard; a full inbox blocks
// the senders (peer readers stop reading: backpressure).
const inboxSize = 4096

// inboxKeep is the capacity of a shard's event buffers that is kept
// however little of it is used; larger buffers are dropped after
// inboxShrinkAfter takes of them with no busy take (more than inboxKeep
// events and more than a quarter of the buffer) in between.
const (
	inboxKeep        = 16
	inboxShrinkAfter = 64
)

// inbox is a shard's queue of events, bounded at inboxSize. It holds
// memory for about as many events as wait at once: a buffered channel of
// inboxSize events (512 bytes each) held 2 MiB per shard replica from the
// start, and even an idle shard, a few events per pass, wrote through all
// of it, so each one's pages ended up resident (issue 31).
//
// Senders append under mu; the run loop takes every waiting event at once
// (take) and gives the buffer back once it has applied them (recycle), so
// two buffers alternate. Only the sender that finds the inbox empty
// signals ready: the run loop takes everything after each signal, so the
// events behind the first need none, and a signal per event left one
// behind after nearly every take, a second, empty take per wake-up
// (issue 31).
type inbox struct {
	mu    sync.Mutex
	q     []event
	spare []event
	// room, made by a sender that found the inbox full, is closed when
	// the run loop takes the events.
	room chan struct{}
	// ready holds a signal while events may wait: sent by the put that
	// finds q empty, so events wait only with a signal pending or about
	// to be sent (a signal may also outlive its events).
	ready chan struct{}
	// small counts the takes of a large buffer since the last busy take
	// (run goroutine only).
	small int
}

func newInbox() *inbox { return &inbox{ready: make(chan struct{}, 1)} }

// put queues ev behind the events queued before it, waiting while
// inboxSize events wait. It reports false, having queued nothing, if stop
// or cancel is closed first.
func (in *inbox) put(ev *event, stop, cancel <-chan struct{}) bool {
	for {
		in.mu.Lock()
		if len(in.q) < inboxSize {
			first := len(in.q) == 0
			in.q = append(in.q, *ev)
			in.mu.Unlock()
			if first {
				select {
				case in.ready <- struct{}{}:
				default: // a signal outlived the events it announced
				}
			}
			return true
		}
		if in.room == nil {
			in.room = make(chan struct{})
		}
		room := in.room
		in.mu.Unlock()
		select {
		case <-room:
		case <-stop:
			return false
		case <-cancel:
			return false
		}
	}
}

// empty reports whether no event waits.
func (in *inbox) empty() bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	return len(in.q) == 0
}

// take returns every waiting event, in order (possibly none: a signal
// can outlive the events it announced). Hand the slice back with recycle.
func (in *inbox) take() []event {
	in.mu.Lock()
	b := in.q
	in.q, in.spare = in.spare[:0], nil
	if in.room != nil {
		close(in.room)
		in.room = nil
	}
	in.mu.Unlock()
	return b
}

// recycle keeps b, taken and applied, as the next buffer unless the
// buffers have been far larger than needed for a while.
func (in *inbox) recycle(b []event) {
	clear(b) // drop what the events point to (records)
	shrink := false
	switch c := cap(b); {
	case len(b) > inboxKeep && len(b) > c/4:
		in.small = 0 // busy
	case c > inboxKeep:
		if in.small++; in.small >= inboxShrinkAfter {
			in.small, shrink = 0, true
		}
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if !shrink {
		if in.spare == nil {
			in.spare = b[:0]
		}
		return
	}
	// Drop b, and the other buffer, which has been as large, unless it
	// now holds more than a small one would.
	if len(in.q) <= inboxKeep && cap(in.q) > inboxKeep {
		in.q = append(make([]event, 0, inboxKeep), in.q...)
	}
}
