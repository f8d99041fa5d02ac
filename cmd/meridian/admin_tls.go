package main

import (
	"errors"
	"fmt"
	"path/filepath"

	"github.com/meridian-mq/meridian/internal/config"
	"github.com/meridian-mq/meridian/internal/tlsutil"
	"github.com/spf13/cobra"
)

// meridian admin tls create-cert: a deployment's CA and one process's
// certificate, with the code `meridian up --tls` and `standalone --tls`
// use (tlsutil.LocalPKI), for processes on other hosts or in containers
// (deploy/compose/init.sh): the names and addresses a client or a peer
// dials the process by are given with --host, its region with --region.
func newTLSCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "tls", Short: "A deployment's CA and certificates (as `meridian up --tls` makes them)"}
	var dir, name, region string
	var hosts, roles []string
	create := &cobra.Command{
		Use:   "create-cert --dir DIR --name NAME [--region REGION] [--role ROLE...] --host HOST...",
		Short: "Make DIR/NAME.pem and DIR/NAME-key.pem (0600), signed by DIR/ca.pem (made, with DIR/ca-key.pem, if missing); existing valid files are kept",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			if dir == "" || name == "" {
				return errors.New("--dir and --name are required")
			}
			if err := config.Name(name); err != nil {
				return fmt.Errorf("--name: %w", err)
			}
			if region != "" {
				if err := config.Name(region); err != nil {
					return fmt.Errorf("--region: %w", err)
				}
			}
			if len(hosts) == 0 {
				return errors.New("--host is required: the names and IPs others dial this process by")
			}
			l, err := tlsutil.HostLeaf(name, region, hosts, roles...)
			if err != nil {
				return err
			}
			files, err := tlsutil.LocalPKI(dir, map[string]tlsutil.Leaf{name: l})
			if err != nil {
				return err
			}
			f := files[name]
			fmt.Printf("%s %s %s\n", f.CertFile, f.KeyFile, filepath.Clean(f.CAFile))
			return nil
		},
	}
	f := create.Flags()
	f.StringVar(&dir, "dir", "", "directory of the CA and the certificates")
	f.StringVar(&name, "name", "", "the certificate's name: its common name and file names")
	f.StringVar(&region, "region", "", "the region the holder speaks for on replication links (URI SAN meridian://region/REGION); none for clients and the witness")
	f.StringArrayVar(&hosts, "host", nil, "a DNS name or IP address the holder is dialled by (repeat, or comma-separate)")
	f.StringArrayVar(&roles, "role", nil, "a role the holder plays (URI SAN meridian://role/ROLE): broker, bookie, autorecovery, etcd (repeat); a bookie takes ledger operations only from a broker or autorecovery, a replication link only from a broker; none for clients")
	cmd.AddCommand(create)
	return cmd
}
