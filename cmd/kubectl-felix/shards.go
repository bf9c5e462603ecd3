package main

import (
	"fmt"

	"github.com/spf13/cobra"
)

func newShardsCmd(connect func() (*env, error)) *cobra.Command {
	var stream string
	cmd := &cobra.Command{
		Use:   "shards [--stream S]",
		Short: "The namespace's shards: leader, epoch, caught-up count, state and preferred leader",
		Example: `  kubectl felix shards
  kubectl felix shards --stream orders -n prod`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			e, err := connect()
			if err != nil {
				return err
			}
			shards, err := listShards(cmd.Context(), e, stream)
			if err != nil {
				return err
			}
			if len(shards) == 0 {
				fmt.Fprintf(cmd.OutOrStdout(), "No FelixShard in namespace %s.\n", e.ns)
				return nil
			}
			return writeShards(cmd.OutOrStdout(), shards)
		},
	}
	cmd.Flags().StringVar(&stream, "stream", "", "only the shards of this FelixStream")
	return cmd
}
