package client

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"

	"felix.dev/felix/broker/peer"
	"felix.dev/felix/broker/record"
	"felix.dev/felix/broker/wire"
	"felix.dev/felix/internal/pki"
)

// Defaults of ClusterOptions.
const (
	// DefaultAttempts bounds the tries of one request through a Cluster.
	DefaultAttempts = 12
	// DefaultClusterDialTimeout bounds one dial and handshake of a Cluster.
	DefaultClusterDialTimeout = 5 * time.Second
)

// ErrNoBootstrap is returned by NewCluster without any address.
var ErrNoBootstrap = errors.New("client: no bootstrap address")

// errClusterClosed is the error of a call on a closed Cluster; it matches
// ErrClosed.
var errClusterClosed = fmt.Errorf("%w: cluster client closed", ErrClosed)

// ClusterOptions configures NewCluster.
type ClusterOptions struct {
	// Options configures every connection (TLS, features). Its default
	// features include wire.FeatureMetadata, which routing needs.
	Options
	// Attempts bounds the tries of one request, the first included; zero
	// means DefaultAttempts.
	Attempts int
	// Backoff is the wait before a try that does not follow a leader hint
	// (after a refusal without a hint, Unavailable, or a lost or refused
	// connection); zero takes peer.Backoff's defaults.
	Backoff peer.Backoff
	// DialTimeout bounds each dial and handshake; zero means
	// DefaultClusterDialTimeout.
	DialTimeout time.Duration
	// After waits out a backoff; nil means time.After.
	After func(time.Duration) <-chan time.Time
	// Logger receives routing events (V(1)); zero discards them.
	Logger logr.Logger
	// Idempotent makes Append idempotent: each shard's appends carry a
	// producer id and the next sequence number on that shard, one append
	// per shard at a time, and an append whose outcome is unknown
	// (unanswered, Unavailable, Fenced) is sent again, within Attempts
	// and the context, since the leader answers a retry of a batch it
	// wrote with the original offsets and writes nothing
	// (docs/clients.md). Needs brokers that accept wire.FeatureIdempotent.
	Idempotent bool
	// Rand is where producer ids come from; nil means crypto/rand.
	Rand io.Reader
}

// Cluster is a client of a whole Felix cluster: it learns the cluster's
// brokers and each shard's leader from any broker it can reach (the
// Metadata request), sends every request to the shard's leader over one
// pooled connection per broker, follows the leader hints of NotLeader and
// ShardUnknown refusals, and learns the metadata again when a leader
// fails over or a shard is unknown.
//
// A request is tried at most ClusterOptions.Attempts times. It is tried
// again after an answer that proves nothing was done (NotLeader,
// ShardUnknown), after Unavailable, and after a connection that broke
// before the request was sent; reads and describes also after a
// connection that broke while they waited. An append or trim whose
// outcome is unknown (sent and not answered, or refused Fenced after it
// was proposed) is never sent again: its error matches ErrUnknownOutcome,
// and the caller re-reads before deciding [FD-1]. Any other answer
// (OffsetMismatch, CursorTooOld, NotAuthorized, ...) is returned as the
// single-connection Client returns it.
//
// With ClusterOptions.Idempotent, appends carry a producer id and per-shard
// sequence numbers, and one whose outcome is unknown is sent again (the
// leader de-duplicates it); see Append.
//
// A broker that knows no cluster (standalone) lists no shards; requests
// then go to the broker the Cluster reached, which serves them. Safe for
// concurrent use.
type Cluster struct {
	o         ClusterOptions
	bootstrap []string
	log       logr.Logger

	mu      sync.Mutex
	brokers []wire.BrokerInfo
	shards  map[record.ShardID]wire.ShardInfo
	hints   map[record.ShardID]string // leader addresses learned from refusals
	conns   map[string]*Client
	anyNext int // rotates the broker tried when no leader is known
	closed  bool

	// producers holds, in idempotent mode, each shard's producer id and
	// next sequence (shardProducer.mu serializes the shard's appends).
	producers map[record.ShardID]*shardProducer
	// counterProducers holds each shard's counter-add producer (always
	// used: counter adds are always idempotent).
	counterProducers map[record.ShardID]*shardProducer

	// stale names the streams whose metadata an asynchronous append's
	// answer proved out of date (AppendAsync learns it again before its
	// next send); tails holds, per shard, the completion of the last
	// idempotent AppendAsync, which the next one waits for.
	stale map[string]bool
	tails map[record.ShardID]chan struct{}
}

// shardProducer is an idempotent Cluster's producer on one shard.
type shardProducer struct {
	mu   sync.Mutex
	id   [16]byte
	next uint64
	ok   bool // id was drawn
}

// NewCluster returns a Cluster that learns the cluster from the first of
// bootstrap (HOST:PORT addresses of any of its brokers, or of a Service
// in front of them) that answers. It fails when none does.
func NewCluster(ctx context.Context, opts ClusterOptions, bootstrap ...string) (*Cluster, error) {
	if len(bootstrap) == 0 {
		return nil, ErrNoBootstrap
	}
	if opts.Attempts <= 0 {
		opts.Attempts = DefaultAttempts
	}
	if opts.DialTimeout <= 0 {
		opts.DialTimeout = DefaultClusterDialTimeout
	}
	if opts.After == nil {
		opts.After = time.After
	}
	if opts.Rand == nil {
		opts.Rand = rand.Reader
	}
	c := &Cluster{o: opts, bootstrap: slices.Clone(bootstrap), log: opts.Logger,
		shards: map[record.ShardID]wire.ShardInfo{}, hints: map[record.ShardID]string{}, conns: map[string]*Client{},
		producers: map[record.ShardID]*shardProducer{}, counterProducers: map[record.ShardID]*shardProducer{}, stale: map[string]bool{}, tails: map[record.ShardID]chan struct{}{}}
	if c.log.GetSink() == nil {
		c.log = logr.Discard()
	}
	if _, err := c.refresh(ctx, nil); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// Close closes every pooled connection; calls in flight fail.
func (c *Cluster) Close() error {
	c.mu.Lock()
	c.closed = true
	conns := c.conns
	c.conns = map[string]*Client{}
	c.mu.Unlock()
	for _, cl := range conns {
		_ = cl.Close()
	}
	return nil
}

// Metadata asks a broker of the cluster for the brokers and the shards of
// streams (every stream the principal may Describe when none is named),
// and routes later requests by the answer.
func (c *Cluster) Metadata(ctx context.Context, streams ...string) (wire.MetadataOK, error) {
	return c.refresh(ctx, streams)
}

// Append is Client.Append sent to the shard's leader. An append whose
// outcome is unknown is not retried; its error matches ErrUnknownOutcome.
// In idempotent mode (ClusterOptions.Idempotent) it is Client.AppendIdempotent
// instead, and an unknown outcome is retried (see appendIdempotent).
func (c *Cluster) Append(ctx context.Context, shard record.ShardID, recs []record.Record, expectTail *uint64) (wire.AppendOK, error) {
	if c.o.Idempotent {
		return c.appendIdempotent(ctx, shard, recs, expectTail)
	}
	var out wire.AppendOK
	err := c.do(ctx, shard, opWrite, func(cl *Client) (err error) {
		out, err = cl.Append(ctx, shard, recs, expectTail)
		return err
	})
	return out, err
}

// Read is Client.Read sent to the shard's leader.
func (c *Cluster) Read(ctx context.Context, req wire.ReadRequest) (wire.ReadOK, error) {
	var out wire.ReadOK
	err := c.do(ctx, req.Shard, opRead, func(cl *Client) (err error) {
		out, err = cl.Read(ctx, req)
		return err
	})
	return out, err
}

// Trim is Client.Trim sent to the shard's leader. A trim whose outcome is
// unknown is not retried; its error matches ErrUnknownOutcome.
func (c *Cluster) Trim(ctx context.Context, req wire.TrimRequest) (wire.TrimOK, error) {
	var out wire.TrimOK
	err := c.do(ctx, req.Shard, opWrite, func(cl *Client) (err error) {
		out, err = cl.Trim(ctx, req)
		return err
	})
	return out, err
}

// Describe is Client.Describe sent to the shard's leader.
func (c *Cluster) Describe(ctx context.Context, shard record.ShardID) (wire.DescribeOK, error) {
	var out wire.DescribeOK
	err := c.do(ctx, shard, opRead, func(cl *Client) (err error) {
		out, err = cl.Describe(ctx, shard)
		return err
	})
	return out, err
}

// op is the kind of request do retries.
type op uint8

const (
	opRead      op = iota // reads, describes: retried after any transient failure
	opWrite               // appends, trims: never resent when they may have landed
	opIdemWrite           // idempotent appends: resent when they may have landed
)

// appendIdempotent sends recs as the next batch of the shard's producer
// and tries again, within Attempts and ctx, whatever the reason the
// outcome is unknown: the leader answers a batch it already wrote with
// its original offsets. The shard's appends go one at a time, so the
// sequence numbers reach the leader in order. After an answer, the next
// append takes the next sequence; after a refusal that wrote nothing
// (OffsetMismatch, RecordTooLarge, ...) the sequence is used again. When
// the leader does not know the producer (OutOfSequence, its state was
// evicted) and nothing of this batch can have landed, the shard gets a
// new producer id and the batch is sent under it. When the attempts run
// out with the outcome still unknown, the error matches ErrUnknownOutcome
// and the shard's next append starts a new producer (the old sequence
// may or may not be used).
func (c *Cluster) appendIdempotent(ctx context.Context, shard record.ShardID, recs []record.Record, expectTail *uint64) (wire.AppendOK, error) {
	var out wire.AppendOK
	err := c.idempotent(ctx, shard, c.producer(shard), "idempotent append", func(cl *Client, p wire.Producer) (err error) {
		out, err = cl.AppendIdempotent(ctx, shard, recs, expectTail, p)
		return err
	})
	return out, err
}

// idempotent sends one request of sp's producer with send, under the
// producer's next sequence, and retries it as appendIdempotent describes.
// what names the request in logs.
func (c *Cluster) idempotent(ctx context.Context, shard record.ShardID, sp *shardProducer, what string, send func(*Client, wire.Producer) error) error {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	for renewed := false; ; renewed = true {
		if !sp.ok {
			if _, err := io.ReadFull(c.o.Rand, sp.id[:]); err != nil {
				return fmt.Errorf("client: drawing a producer id: %w", err)
			}
			if sp.id == ([16]byte{}) {
				sp.id[0] = 1
			}
			sp.ok, sp.next = true, 0
		}
		p := wire.Producer{ID: sp.id, Seq: sp.next}
		maybeWritten := false
		err := c.do(ctx, shard, opIdemWrite, func(cl *Client) error {
			err := send(cl, p)
			if err != nil && mayHaveLanded(err) {
				maybeWritten = true
			}
			return err
		})
		switch {
		case err == nil:
			sp.next++
			return nil
		case maybeWritten:
			sp.ok = false // the sequence may or may not be used: start a new producer
			c.log.V(1).Info(what+" outcome unknown; new producer", "shard", shard.String(), "seq", p.Seq)
			if errors.Is(err, ErrUnknownOutcome) {
				return err
			}
			return &UnknownOutcomeError{Err: err}
		case errors.Is(err, wire.ErrOutOfSequence) && !renewed:
			// The leader lost this producer (evicted, or written before the
			// part of the log it rebuilt from) and nothing of this request
			// was written: send it as the first of a new producer.
			c.log.V(1).Info("producer unknown to the leader; new producer", "shard", shard.String(), "request", what, "error", err.Error())
			sp.ok = false
			continue
		}
		if errors.Is(err, wire.ErrOutOfSequence) {
			sp.ok = false
		}
		return err
	}
}

// mayHaveLanded reports whether a failed idempotent append may have been
// written: sent and not answered, or answered Unavailable or Fenced.
func mayHaveLanded(err error) bool {
	if errors.Is(err, ErrUnknownOutcome) {
		return true
	}
	var we *wire.Error
	return errors.As(err, &we) && (we.Code == wire.CodeUnavailable || we.Code == wire.CodeFenced)
}

// producer returns the shard's producer of an idempotent Cluster.
func (c *Cluster) producer(shard record.ShardID) *shardProducer {
	c.mu.Lock()
	defer c.mu.Unlock()
	sp := c.producers[shard]
	if sp == nil {
		sp = &shardProducer{}
		c.producers[shard] = sp
	}
	return sp
}

// next says what to do after a failed try.
type next uint8

const (
	stop       next = iota // return the error
	followHint             // try the hinted leader at once
	retryLater             // wait, learn the metadata again, try again
)

// do runs call against shard's leader until it succeeds, fails for good,
// or runs out of attempts. o says what may be retried: the unknown
// outcomes of appends and trims (opWrite) never are, those of idempotent
// appends (opIdemWrite) are.
func (c *Cluster) do(ctx context.Context, shard record.ShardID, o op, call func(*Client) error) error {
	return c.doAt(ctx, shard, o, func(_ string, cl *Client) error { return call(cl) })
}

// doAt is do with call told the address of the broker it is sent to.
func (c *Cluster) doAt(ctx context.Context, shard record.ShardID, o op, call func(addr string, cl *Client) error) error {
	waits := 0
	for attempt := 1; ; attempt++ {
		addr := c.route(shard)
		cl, err := c.conn(ctx, addr)
		dialFailed := err != nil
		if err == nil {
			if err = call(addr, cl); err == nil {
				return nil
			}
		}
		if ctx.Err() != nil {
			return err
		}
		what, err := c.classify(shard, addr, cl, dialFailed, o, err)
		if what == stop {
			return err
		}
		if attempt >= c.o.Attempts {
			return fmt.Errorf("client: %s: gave up after %d attempts: %w", shard, attempt, err)
		}
		if what == followHint {
			continue
		}
		waits++
		select {
		case <-ctx.Done():
			return err
		case <-c.o.After(c.o.Backoff.Delay(waits)):
		}
		if _, rerr := c.refresh(ctx, []string{shard.Stream}); rerr != nil {
			c.log.V(1).Info("metadata refresh failed", "shard", shard.String(), "error", rerr.Error())
		}
	}
}

// classify decides what follows a failed try of a request for shard sent
// to addr over cl (nil when the dial failed), and the error to return.
func (c *Cluster) classify(shard record.ShardID, addr string, cl *Client, dialFailed bool, o op, err error) (next, error) {
	write := o == opWrite
	if o == opIdemWrite && errors.Is(err, ErrUnknownOutcome) && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
		// Sent and not answered: the leader de-duplicates the resend.
		if errors.Is(err, ErrClosed) {
			c.drop(addr, cl)
		}
		c.setHint(shard, "")
		return retryLater, err
	}
	if errors.Is(err, ErrUnknownOutcome) || errors.Is(err, ErrNotAuthorized) || errors.Is(err, ErrUnauthenticated) {
		return stop, err
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, errClusterClosed) {
		return stop, err
	}
	if strangerAt(err, addr, c.bootstrap) {
		// An address learned from the metadata or a hint that is no
		// longer this cluster's broker: pod addresses are reused, and
		// the one the metadata named may now be another cluster's
		// broker (or anyone's server). Nothing was sent; ask again.
		c.log.V(1).Info("address refused as not this cluster's broker; refreshing", "shard", shard.String(), "address", addr, "error", err.Error())
		c.drop(addr, cl)
		c.setHint(shard, "")
		return retryLater, err
	}
	if refusedIdentity(err) {
		// The broker's certificate or TLS parameters, or the client's
		// identity, were refused: no retry changes that.
		return stop, err
	}
	var we *wire.Error
	if errors.As(err, &we) {
		switch we.Code {
		case wire.CodeNotLeader, wire.CodeShardUnknown:
			if we.Leader != "" && we.Leader != addr {
				c.log.V(1).Info("following leader hint", "shard", shard.String(), "from", addr, "to", we.Leader, "epoch", we.Epoch)
				c.setHint(shard, we.Leader)
				return followHint, err
			}
			c.setHint(shard, "")
			return retryLater, err
		case wire.CodeUnavailable:
			if write {
				// A broker answers Unavailable both before it proposes
				// (a leader still recovering, no leader known) and for
				// a proposal its replica stopped waiting on, which may
				// still commit: resending could write it twice, so a
				// write's outcome is unknown.
				return stop, &UnknownOutcomeError{Err: err}
			}
			return retryLater, err
		case wire.CodeFenced:
			if o == opIdemWrite {
				// Proposed by a deposed leader: the new one de-duplicates.
				c.setHint(shard, "")
				return retryLater, err
			}
			if write {
				// Refused after it was proposed: it may or may not survive.
				return stop, &UnknownOutcomeError{Err: err}
			}
		}
		return stop, err
	}
	if dialFailed || errors.Is(err, ErrClosed) {
		// The broker is gone or the connection broke before the request
		// went out (a request that went out and was not answered matched
		// ErrUnknownOutcome above, or is a read or describe).
		c.drop(addr, cl)
		c.setHint(shard, "")
		return retryLater, err
	}
	return stop, err
}

// route returns the address to send shard's requests to: a leader learned
// from a refusal, else the metadata's leader, else any broker.
func (c *Cluster) route(shard record.ShardID) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if a := c.hints[shard]; a != "" {
		return a
	}
	if s, ok := c.shards[shard]; ok && s.Leader != "" {
		for _, b := range c.brokers {
			if b.Name == s.Leader && b.Address != "" {
				return b.Address
			}
		}
	}
	cands := c.candidatesLocked()
	return cands[c.anyNext%len(cands)]
}

// candidatesLocked lists the addresses worth asking anything: brokers
// with an open connection first, then the other known brokers, then the
// bootstrap addresses; never empty.
func (c *Cluster) candidatesLocked() []string {
	var open, rest []string
	seen := map[string]bool{}
	add := func(a string) {
		if a == "" || seen[a] {
			return
		}
		seen[a] = true
		if cl, ok := c.conns[a]; ok && !cl.finished() {
			open = append(open, a)
		} else {
			rest = append(rest, a)
		}
	}
	for _, b := range c.brokers {
		add(b.Address)
	}
	for _, a := range c.bootstrap {
		add(a)
	}
	return append(open, rest...)
}

func (c *Cluster) setHint(shard record.ShardID, addr string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if addr == "" {
		delete(c.hints, shard)
		return
	}
	c.hints[shard] = addr
}

// conn returns the pooled connection to addr, dialling it if there is
// none or the one there broke.
func (c *Cluster) conn(ctx context.Context, addr string) (*Client, error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, errClusterClosed
	}
	if cl, ok := c.conns[addr]; ok && !cl.finished() {
		c.mu.Unlock()
		return cl, nil
	}
	c.mu.Unlock()
	dctx, cancel := context.WithTimeout(ctx, c.o.DialTimeout)
	defer cancel()
	cl, err := Dial(dctx, addr, c.o.Options)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		_ = cl.Close()
		return nil, errClusterClosed
	}
	if old, ok := c.conns[addr]; ok && !old.finished() {
		_ = cl.Close() // another caller dialled it first
		return old, nil
	}
	c.conns[addr] = cl
	return cl, nil
}

// drop forgets a broken connection (cl, if still pooled under addr) and
// moves the choice of "any broker" on.
func (c *Cluster) drop(addr string, cl *Client) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.anyNext++
	if cl != nil && c.conns[addr] == cl {
		delete(c.conns, addr)
		_ = cl.Close()
	}
}

// refresh asks the candidate brokers in turn for the metadata of streams
// until one answers, and routes by the answer: the broker list is
// replaced, and so are the shards of the streams asked for (of every
// stream when none is named). A broker that does not serve metadata (an
// older one) counts as an answer with nothing in it.
func (c *Cluster) refresh(ctx context.Context, streams []string) (wire.MetadataOK, error) {
	c.mu.Lock()
	cands := c.candidatesLocked()
	c.mu.Unlock()
	var last error
	for _, addr := range cands {
		cl, err := c.conn(ctx, addr)
		if err != nil {
			if strangerAt(err, addr, c.bootstrap) {
				last = err // a stale address: another broker may answer
				continue
			}
			if refusedIdentity(err) || ctx.Err() != nil {
				return wire.MetadataOK{}, err // every broker of the cluster would say the same
			}
			last = err
			continue
		}
		m, err := cl.Metadata(ctx, streams...)
		if errors.Is(err, ErrNoMetadata) {
			return m, nil
		}
		if err != nil {
			if errors.Is(err, ErrNotAuthorized) || ctx.Err() != nil {
				return m, err
			}
			if errors.Is(err, ErrClosed) {
				c.drop(addr, cl)
			}
			last = err
			continue
		}
		c.learn(streams, m)
		return m, nil
	}
	return wire.MetadataOK{}, fmt.Errorf("client: no broker answered for the cluster's metadata (tried %s; the last said): %w",
		strings.Join(cands, ", "), last)
}

// strangerAt reports whether err is a failed TLS handshake with addr, an
// address the client learned (from the metadata or a refusal's hint), not
// one it was given: the certificate there is not this cluster's broker's.
// Such an address is out of date rather than the client misconfigured, so
// it is dropped and the metadata asked again; a bootstrap address that
// fails the same way stops the request (refusedIdentity).
//
// Only the client's verdict on the server's certificate counts: a server
// that refused the client's own certificate (expired, another CA) would
// refuse it at every broker, so that stops at once as before.
func strangerAt(err error, addr string, bootstrap []string) bool {
	var he *HandshakeError
	if !errors.As(err, &he) || slices.Contains(bootstrap, addr) {
		return false
	}
	for _, e := range []error{pki.ErrUntrusted, pki.ErrWrongCluster, pki.ErrNotBroker, pki.ErrNoIdentity, pki.ErrAmbiguousIdentity} {
		if errors.Is(he.Err, e) {
			return true
		}
	}
	return false
}

// refusedIdentity reports whether err refuses the connection's identity,
// or the broker's certificate, rather than the broker being away.
func refusedIdentity(err error) bool {
	if errors.Is(err, ErrUnauthenticated) || errors.Is(err, ErrNotAuthorized) {
		return true
	}
	var he *HandshakeError
	var ne net.Error
	return errors.As(err, &he) && !(errors.As(he.Err, &ne) && ne.Timeout())
}

// learn adopts metadata m, the answer for streams.
func (c *Cluster) learn(streams []string, m wire.MetadataOK) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(m.Brokers) > 0 {
		c.brokers = m.Brokers
	}
	asked := map[string]bool{}
	for _, s := range streams {
		asked[s] = true
	}
	for id := range c.shards {
		if len(streams) == 0 || asked[id.Stream] {
			delete(c.shards, id)
		}
	}
	for _, s := range m.Shards {
		c.shards[s.Shard] = s
		if s.Leader != "" {
			// Learned after the hint: the metadata is the newer word.
			delete(c.hints, s.Shard)
		}
	}
}
