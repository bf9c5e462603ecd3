package main

import (
	"fmt"
	"io"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
)

// newLogger returns a JSON-lines logr.Logger writing to w at verbosity 0.
func newLogger(w io.Writer) logr.Logger {
	return funcr.NewJSON(func(obj string) { _, _ = fmt.Fprintln(w, obj) }, funcr.Options{})
}
