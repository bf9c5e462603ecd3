package server

import (
	"sync"

	"felix.dev/felix/broker/record"
)

// perShard holds one *T per shard this broker served a request for that
// needs it (the idempotent producers' tables, the counter logs' folds):
// bounded by the shards it holds. The zero value is ready to use.
type perShard[T any] struct {
	mu     sync.Mutex
	shards map[record.ShardID]*T
}

// get returns the shard's T, made by mk the first time.
func (p *perShard[T]) get(id record.ShardID, mk func() *T) *T {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.shards == nil {
		p.shards = map[record.ShardID]*T{}
	}
	t := p.shards[id]
	if t == nil {
		t = mk()
		p.shards[id] = t
	}
	return t
}
