package member

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"felix.dev/felix/broker/controlplane"
	"felix.dev/felix/broker/record"
	"felix.dev/felix/broker/server"
)

// errNotServing: the report writer asked for groups before the server
// was up; the report is written without them.
var errNotServing = errors.New("member: not serving yet")

// groupLagger is what reportGroups needs of the server.
type groupLagger interface {
	GroupLags(shard record.ShardID) ([]server.GroupLag, error)
}

// reportGroups answers controlplane.ReportOptions.Groups from the
// server's group folds. shard is a FelixShard name, <stream>-<index>.
func reportGroups(srv groupLagger, shard string) ([]controlplane.GroupPosition, error) {
	id, err := parseShardName(shard)
	if err != nil {
		return nil, err
	}
	lags, err := srv.GroupLags(id)
	if err != nil {
		return nil, fmt.Errorf("member: groups of %s: %w", shard, err)
	}
	out := make([]controlplane.GroupPosition, 0, len(lags))
	for _, l := range lags {
		out = append(out, controlplane.GroupPosition{Group: l.Group, Committed: l.Committed, Lag: l.Lag})
	}
	return out, nil
}

// parseShardName is shardName's inverse: the index follows the name's
// last '-' (a stream's name may hold '-' itself).
func parseShardName(name string) (record.ShardID, error) {
	i := strings.LastIndexByte(name, '-')
	if i <= 0 {
		return record.ShardID{}, fmt.Errorf("member: %q is not a shard name <stream>-<index>", name)
	}
	n, err := strconv.ParseUint(name[i+1:], 10, 32)
	if err != nil {
		return record.ShardID{}, fmt.Errorf("member: %q is not a shard name <stream>-<index>: %w", name, err)
	}
	return record.ShardID{Stream: name[:i], Shard: uint32(n)}, nil
}
