package main

import (
	"fmt"
	"runtime"

	"github.com/spf13/cobra"

	"felix.dev/felix/internal/version"
)

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the felix version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			commit := version.Commit
			if commit == "" {
				commit = "unknown"
			}
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "felix %s (commit %s, %s, %s/%s)\n",
				version.Version, commit, runtime.Version(), runtime.GOOS, runtime.GOARCH)
			return err
		},
	}
}
