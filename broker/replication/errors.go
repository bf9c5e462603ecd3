package replication

import (
	"errors"
	"fmt"
)

// ErrNotLeader refuses a proposal to a replica that does not lead its shard.
// The refusal is a *NotLeaderError naming the leader it knows.
var ErrNotLeader = errors.New("not leader")

// ErrRecovering refuses a proposal to a newly promoted leader that has not
// yet written its fence; the client should retry the same broker shortly.
var ErrRecovering = errors.New("leader recovering")

// ErrFenced refuses a pending proposal of a leader that learned of a newer
// epoch. The batch was NOT acknowledged; it may or may not survive.
var ErrFenced = errors.New("fenced by a newer epoch")

// NotLeaderError is the refusal of a proposal to a non-leader; Leader is the
// leader this replica knows ("" if none) at Epoch.
type NotLeaderError struct {
	Leader NodeID
	Epoch  uint64
}

func (e *NotLeaderError) Error() string {
	return fmt.Sprintf("not leader: leader is %q at epoch %d", e.Leader, e.Epoch)
}

// Is makes errors.Is(err, ErrNotLeader) true.
func (e *NotLeaderError) Is(target error) bool { return target == ErrNotLeader }
