package main

import (
	"os"

	"github.com/meridian-mq/meridian/internal/config"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

//go:generate go run . config-doc --out ../../docs/configuration.md

// newConfigDocCmd writes docs/configuration.md (make docs): every key of
// every role, from the flag sets (TestConfigDocIsFresh holds the file to
// it).
func newConfigDocCmd() *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:    "config-doc",
		Short:  "Write the configuration reference (docs/configuration.md) from the roles' flags",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if out == "" {
				return config.WriteDoc(cmd.OutOrStdout(), docRoles())
			}
			f, err := os.Create(out)
			if err != nil {
				return err
			}
			if err := config.WriteDoc(f, docRoles()); err != nil {
				f.Close()
				return err
			}
			return f.Close()
		},
	}
	cmd.Flags().StringVar(&out, "out", "", "file to write (default: standard output)")
	return cmd
}

// docRoles are the server roles with the root's flags merged in, built
// afresh as knownKeys builds them (no root: newRoot would reset the
// global --log-level variable).
func docRoles() []config.Role {
	var level string
	var roles []config.Role
	for _, ctor := range roleConstructors() {
		c := ctor()
		fs := pflag.NewFlagSet(c.Name(), pflag.ContinueOnError)
		rootFlags(fs, &level)
		fs.AddFlagSet(c.Flags())
		roles = append(roles, config.Role{Name: c.Name(), Short: c.Short, Flags: fs})
	}
	return roles
}
