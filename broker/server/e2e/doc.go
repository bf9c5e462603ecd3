// Package e2e holds the end-to-end test of the broker and the client
// commands: it builds the felix binary, runs a real `felix broker` process
// on loopback and drives it through `felix append|read|trim|describe`.
package e2e
