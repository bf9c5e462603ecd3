package auth

import (
	"errors"
	"fmt"
	"strings"
	"sync"
)

// ErrNotAuthorized is wrapped by every refusal of an Authorizer.
var ErrNotAuthorized = errors.New("auth: not authorized")

// ErrUnknownOperation is wrapped by ParseOperation's error.
var ErrUnknownOperation = errors.New("auth: unknown operation")

// Operation is a client operation on a stream. Values are stable.
type Operation uint8

// The operations. Each is granted on its own; none implies another.
const (
	OpAppend Operation = iota + 1
	OpRead
	OpTrim
	OpDescribe
)

// String returns the operation's name as ParseOperation reads it.
func (o Operation) String() string {
	switch o {
	case OpAppend:
		return "Append"
	case OpRead:
		return "Read"
	case OpTrim:
		return "Trim"
	case OpDescribe:
		return "Describe"
	}
	return fmt.Sprintf("Operation(%d)", uint8(o))
}

// ParseOperation parses "Append", "Read", "Trim" or "Describe" (exact
// case), or returns an error wrapping ErrUnknownOperation.
func ParseOperation(s string) (Operation, error) {
	for _, o := range []Operation{OpAppend, OpRead, OpTrim, OpDescribe} {
		if s == o.String() {
			return o, nil
		}
	}
	return 0, fmt.Errorf("%w %q (want Append, Read, Trim or Describe)", ErrUnknownOperation, s)
}

// PrincipalKind says what authenticated a connection.
type PrincipalKind uint8

// The kinds of principal. The zero value is Anonymous: a connection that
// presented no identity.
const (
	Anonymous PrincipalKind = iota
	User
	Broker
	Operator
)

// String returns the kind's lower-case name.
func (k PrincipalKind) String() string {
	switch k {
	case Anonymous:
		return "anonymous"
	case User:
		return "user"
	case Broker:
		return "broker"
	case Operator:
		return "operator"
	}
	return fmt.Sprintf("PrincipalKind(%d)", uint8(k))
}

// Principal is who a connection authenticated as. Name is empty for
// Anonymous; for Broker it is the broker's name in its cluster. UID is,
// for a User, the uid of the FelixUser its certificate was issued to
// ("" when the certificate carries none); Table refuses a user whose UID
// is not the current FelixUser's.
type Principal struct {
	Kind PrincipalKind
	Name string
	UID  string
}

// String renders the principal for logs, e.g. "user/alice".
func (p Principal) String() string {
	if p.Kind == Anonymous {
		return "anonymous"
	}
	return p.Kind.String() + "/" + p.Name
}

// Grant allows Ops on one stream, or on every stream whose name starts
// with Stream when Prefix is set (Stream "" with Prefix: every stream).
type Grant struct {
	Stream string
	Prefix bool
	Ops    []Operation
}

// Matches reports whether g allows op on stream.
func (g Grant) Matches(op Operation, stream string) bool {
	if g.Prefix {
		if !strings.HasPrefix(stream, g.Stream) {
			return false
		}
	} else if stream != g.Stream {
		return false
	}
	for _, o := range g.Ops {
		if o == op {
			return true
		}
	}
	return false
}

// allowedBy reports whether any grant allows op on stream.
func allowedBy(grants []Grant, op Operation, stream string) bool {
	for _, g := range grants {
		if g.Matches(op, stream) {
			return true
		}
	}
	return false
}

// Authorizer decides whether p may perform op on stream. A refusal is an
// error wrapping ErrNotAuthorized whose text names the principal, the
// operation and the stream (never a secret). Implementations are safe for
// concurrent use.
type Authorizer interface {
	Authorize(p Principal, op Operation, stream string) error
}

// AnonymousGate is implemented by authorizers that can refuse anonymous
// connections outright: the server then refuses such a connection at its
// Hello (Unauthenticated) instead of refusing each request.
type AnonymousGate interface {
	// AnonymousAllowed reports whether connections without an identity
	// may go on past the Hello.
	AnonymousAllowed() bool
}

// AllowAll allows every operation to everyone, anonymous included: the
// authorizer of a standalone broker that runs without authentication.
type AllowAll struct{}

// Authorize implements Authorizer; it never refuses.
func (AllowAll) Authorize(Principal, Operation, string) error { return nil }

// AnonymousAllowed implements AnonymousGate; it is always true.
func (AllowAll) AnonymousAllowed() bool { return true }

// refusal is the error of a refused operation.
func refusal(p Principal, op Operation, stream, why string) error {
	return fmt.Errorf("%w: %s may not %s on stream %q (%s)", ErrNotAuthorized, p, op, stream, why)
}

// Table is the Authorizer fed by a watch of the cluster's grants (the
// rules are in the package documentation). The zero value refuses every
// user and anonymous connection; it is safe for concurrent use.
type Table struct {
	mu        sync.RWMutex
	users     map[string]userEntry
	anonymous []Grant
	anonOK    bool
}

// userEntry is one user's row: the uid of the FelixUser that holds the
// name now, and its grants.
type userEntry struct {
	uid    string
	grants []Grant
}

var (
	_ Authorizer    = (*Table)(nil)
	_ AnonymousGate = (*Table)(nil)
	_ Authorizer    = AllowAll{}
	_ AnonymousGate = AllowAll{}
)

// NewTable returns an empty table: every user and anonymous connection is
// refused until Set and SetAnonymous say otherwise.
func NewTable() *Table { return &Table{} }

// Set records that user is, from now on, the FelixUser of uid (its
// metadata.uid) with grants (a copy is kept), replacing what was known
// of the name. Only principals whose UID is uid are granted anything: a
// certificate of an earlier FelixUser of the same name (another uid) is
// refused. An empty uid matches no principal.
func (t *Table) Set(user, uid string, grants []Grant) {
	cp := cloneGrants(grants)
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.users == nil {
		t.users = map[string]userEntry{}
	}
	t.users[user] = userEntry{uid: uid, grants: cp}
}

// Delete forgets user: it is refused everything from then on.
func (t *Table) Delete(user string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.users, user)
}

// SetAnonymous sets whether anonymous connections are allowed at all and,
// if so, what they may do.
func (t *Table) SetAnonymous(grants []Grant, allowed bool) {
	cp := cloneGrants(grants)
	t.mu.Lock()
	defer t.mu.Unlock()
	t.anonymous, t.anonOK = cp, allowed
}

// AnonymousAllowed implements AnonymousGate.
func (t *Table) AnonymousAllowed() bool {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.anonOK
}

// Authorize implements Authorizer.
func (t *Table) Authorize(p Principal, op Operation, stream string) error {
	switch p.Kind {
	case Broker:
		if op == OpDescribe {
			return nil
		}
		return refusal(p, op, stream, "brokers may only Describe on the client port")
	case Operator:
		if op == OpDescribe {
			return nil
		}
		return refusal(p, op, stream, "the operator may only Describe")
	case Anonymous:
		t.mu.RLock()
		ok, grants := t.anonOK, t.anonymous
		t.mu.RUnlock()
		if !ok {
			return refusal(p, op, stream, "anonymous access is not allowed")
		}
		if allowedBy(grants, op, stream) {
			return nil
		}
		return refusal(p, op, stream, "no anonymous grant")
	case User:
		t.mu.RLock()
		e, known := t.users[p.Name]
		t.mu.RUnlock()
		switch {
		case !known:
			return refusal(p, op, stream, "unknown user")
		case p.UID == "":
			return refusal(p, op, stream, "the certificate is not bound to a FelixUser uid")
		case p.UID != e.uid:
			return refusal(p, op, stream, "certificate was issued to an earlier FelixUser of this name")
		}
		if allowedBy(e.grants, op, stream) {
			return nil
		}
		return refusal(p, op, stream, "no grant")
	}
	return refusal(p, op, stream, "unknown principal kind")
}

func cloneGrants(gs []Grant) []Grant {
	out := make([]Grant, len(gs))
	for i, g := range gs {
		g.Ops = append([]Operation(nil), g.Ops...)
		out[i] = g
	}
	return out
}
