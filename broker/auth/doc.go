// Package auth decides who may do what on a broker: it owns one decision,
// whether a principal (an authenticated client, a broker, an operator, or
// an anonymous connection) may perform an operation (append, read, trim,
// describe) on a stream.
//
// It does not authenticate: the server learns the Principal of a
// connection from a function the runtime supplies (a client certificate
// verified after the TLS handshake) and asks an Authorizer before every
// request. Table is the authorizer fed by a watch of the cluster's grants;
// AllowAll is the authorizer of a standalone broker that runs without
// authentication.
//
// Rules of Table:
//   - a user is allowed exactly what its grants list; an unknown user is
//     refused everything;
//   - a user is known by name and uid: Set records the uid of the
//     FelixUser that holds the name, and a principal whose UID differs
//     (a certificate issued to an earlier FelixUser of the same name,
//     deleted and recreated since) or is empty (a certificate bound to no
//     FelixUser) is refused everything;
//   - grants never imply each other: Append does not imply Trim, Read does
//     not imply Describe;
//   - anonymous connections are refused unless SetAnonymous allowed them,
//     and then get only the anonymous grants;
//   - a broker (Kind Broker) gets no client operation except Describe: a
//     broker reaches another broker's logs only through replication on the
//     peer port, and Describe lets tooling running with a broker identity
//     read positions without touching data;
//   - an operator (Kind Operator, the Kubernetes operator) may Describe
//     every stream and nothing else: it observes positions, it never
//     touches data.
package auth
