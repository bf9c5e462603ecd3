// Command felix is the one binary of Felix: the operator, the broker and the
// client commands are roles of it (one image, several roles).
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root := newRootCmd()
	if err := root.ExecuteContext(ctx); err != nil {
		var coded *exitError
		if errors.As(err, &coded) {
			os.Exit(coded.code)
		}
		fmt.Fprintln(os.Stderr, "felix:", err)
		os.Exit(1)
	}
}

// exitError carries an exit code for a command that already reported its
// error (for example as JSON on stderr).
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "felix",
		Short:         "Felix: a sharded, replicated, durable log on Kubernetes",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(
		newVersionCmd(),
		newRestorePointCmd(),
		newLogCmd(),
		newOperatorCmd(),
		newBrokerCmd(),
		newAppendCmd(),
		newReadCmd(),
		newTrimCmd(),
		newDescribeCmd(),
		newCounterCmd(),
		newGroupsCmd(),
		newGroupCmd(),
		newDeadLetterCmd(),
		newShardsCmd(),
		newStreamsCmd(),
		newBenchCmd(),
		newFelixdCmd(),
	)
	return root
}
