package main

import (
	"fmt"
	"io"
	"sync"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
)

// newLogger returns a JSON-lines logr.Logger writing to w at verbosity 0.
func newLogger(w io.Writer) logr.Logger { return newJSONLogger(w, 0) }

// newJSONLogger returns a JSON-lines logr.Logger writing whole lines to w
// at the given verbosity. Lines from concurrent goroutines never
// interleave: writes to w are serialised, so w need not be safe for
// concurrent use.
func newJSONLogger(w io.Writer, verbosity int) logr.Logger {
	var mu sync.Mutex
	return funcr.NewJSON(func(obj string) {
		mu.Lock()
		defer mu.Unlock()
		_, _ = fmt.Fprintln(w, obj)
	}, funcr.Options{Verbosity: verbosity})
}
