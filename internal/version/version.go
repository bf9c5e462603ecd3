// Package version holds the build identity of the felix binary. The values
// are set at link time (-ldflags "-X felix.dev/felix/internal/version.Version=...").
package version

// Version is the release name; "dev" for builds without link-time flags.
var Version = "dev"

// Commit is the source revision the binary was built from; empty when unknown.
var Commit = ""
