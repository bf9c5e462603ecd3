package client

import (
	"errors"
	"fmt"

	"felix.dev/felix/broker/auth"
	"felix.dev/felix/broker/record"
	"felix.dev/felix/broker/wire"
)

// ErrNotAuthorized is matched (errors.Is) by the error of a request the
// broker refused because the connection's principal lacks a grant for it
// (wire NotAuthorized): nothing was done, and retrying does not help until
// the grants change.
var ErrNotAuthorized = errors.New("client: not authorized")

// ErrUnauthenticated is matched by the error of a Dial the broker refused
// at the Hello because the connection presented no acceptable identity
// (wire Unauthenticated): no client certificate where anonymous access is
// not allowed, or one the broker does not trust.
var ErrUnauthenticated = errors.New("client: unauthenticated")

// AuthError is the error of a request, or of a Dial, that the broker
// refused on grounds of identity. It says what was refused; Err is the
// broker's answer (errors.As to *wire.Error still works), whose Message
// names the principal the broker saw and why.
type AuthError struct {
	// Op is the refused operation; zero for a refused Dial (Hello).
	Op auth.Operation
	// Shard is the request's shard; zero for a refused Dial.
	Shard record.ShardID
	// Err is the broker's error, Code NotAuthorized or Unauthenticated.
	Err *wire.Error
}

func (e *AuthError) Error() string {
	if e.Err.Code == wire.CodeUnauthenticated {
		return "unauthenticated: the broker refused the connection: " + e.Err.Message
	}
	if e.Op == 0 {
		return "not authorized: " + e.Err.Message
	}
	return fmt.Sprintf("not authorized to %s stream %q shard %d: %s", e.Op, e.Shard.Stream, e.Shard.Shard, e.Err.Message)
}

// Is matches ErrNotAuthorized or ErrUnauthenticated by the code.
func (e *AuthError) Is(target error) bool {
	switch e.Err.Code {
	case wire.CodeNotAuthorized:
		return target == ErrNotAuthorized
	case wire.CodeUnauthenticated:
		return target == ErrUnauthenticated
	}
	return false
}

// Unwrap returns the broker's error.
func (e *AuthError) Unwrap() error { return e.Err }

// authError wraps a broker error of code NotAuthorized or Unauthenticated
// in an *AuthError for op on shard; any other err is returned as is.
func authError(err error, op auth.Operation, shard record.ShardID) error {
	var we *wire.Error
	if !errors.As(err, &we) || (we.Code != wire.CodeNotAuthorized && we.Code != wire.CodeUnauthenticated) {
		return err
	}
	var ae *AuthError
	if errors.As(err, &ae) {
		return err
	}
	return &AuthError{Op: op, Shard: shard, Err: we}
}
