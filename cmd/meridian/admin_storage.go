package main

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/meridian-mq/meridian/bookie/autorecovery"
	"github.com/meridian-mq/meridian/bookie/ledger"
	"github.com/meridian-mq/meridian/cluster"
	"github.com/meridian-mq/meridian/proto/bookiepb"
	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// `meridian admin bookies list` and `meridian admin recovery status` read
// the region's etcd (and ask each bookie for its disk usage).
func newAdminStorageCmds() []*cobra.Command {
	var etcd, region string
	connect := func(ctx context.Context) (*cluster.Store, error) {
		return cluster.Connect(ctx, cluster.StoreConfig{Endpoints: splitList(etcd), Prefix: MetadataConfig{}.regionPrefix(region)})
	}
	flags := func(c *cobra.Command) {
		c.Flags().StringVar(&etcd, "etcd", "http://127.0.0.1:2379", "the region's etcd endpoints")
		c.Flags().StringVar(&region, "region", "default", "the region")
	}
	bookies := &cobra.Command{Use: "bookies", Short: "Bookies of a region"}
	list := &cobra.Command{
		Use:   "list",
		Short: "Each bookie's region, rack, state, disk usage and fragment count",
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), 60*time.Second)
			defer cancel()
			s, err := connect(ctx)
			if err != nil {
				return err
			}
			defer s.Close()
			view, err := cluster.WatchBookies(ctx, s)
			if err != nil {
				return err
			}
			defer view.Close()
			frags, err := fragmentsPerBookie(ctx, s)
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tADDR\tREGION\tRACK\tSTATE\tDISK USED\tFRAGMENTS")
			seen := map[string]bool{}
			for _, b := range view.Bookies(false) {
				seen[b.Reg.Id] = true
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\n", b.Reg.Id, b.Reg.Addr, b.Reg.Region, b.Reg.Rack, b.State, diskUsage(ctx, b.Reg.Addr), frags[b.Reg.Id])
			}
			var gone []string
			for id := range frags {
				if !seen[id] {
					gone = append(gone, id)
				}
			}
			sort.Strings(gone)
			for _, id := range gone {
				fmt.Fprintf(tw, "%s\t-\t-\t-\tnot registered\t-\t%d\n", id, frags[id])
			}
			return tw.Flush()
		},
	}
	flags(list)
	bookies.AddCommand(list)

	recovery := &cobra.Command{Use: "recovery", Short: "Auto-recovery"}
	status := &cobra.Command{
		Use:   "status",
		Short: "Ledgers waiting for re-replication (under-replicated), with their lost bookies",
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), 30*time.Second)
			defer cancel()
			s, err := connect(ctx)
			if err != nil {
				return err
			}
			defer s.Close()
			ms, err := autorecovery.ListMarkers(ctx, s)
			if err != nil {
				return err
			}
			fmt.Printf("%d under-replicated ledger(s)\n", len(ms))
			tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			if len(ms) > 0 {
				fmt.Fprintln(tw, "LEDGER\tLOST BOOKIES\tFRAGMENTS\tWAITING")
			}
			for _, m := range ms {
				fmt.Fprintf(tw, "%d\t%s\t%d\t%s\n", m.LedgerID, strings.Join(m.Lost, ","), len(m.Fragments), time.Since(time.UnixMilli(m.CtimeMs)).Round(time.Second))
			}
			return tw.Flush()
		},
	}
	flags(status)
	recovery.AddCommand(status)
	return []*cobra.Command{bookies, recovery}
}

// fragmentsPerBookie counts, for each bookie, the fragments whose ensemble
// holds it.
func fragmentsPerBookie(ctx context.Context, s *cluster.Store) (map[string]int, error) {
	ids, err := ledger.ListLedgers(ctx, s)
	if err != nil {
		return nil, err
	}
	out := map[string]int{}
	for _, id := range ids {
		m, err := ledger.ReadMetadata(ctx, s, id)
		if err != nil {
			continue // deleted meanwhile
		}
		for _, f := range m.Meta.Fragments {
			for _, b := range f.Ensemble {
				out[b.Id]++
			}
		}
	}
	return out, nil
}

// diskUsage asks a bookie for its disk usage ("-" if it does not answer).
func diskUsage(ctx context.Context, addr string) string {
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return "-"
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	info, err := bookiepb.NewBookieClient(cc).Info(ctx, &bookiepb.InfoRequest{})
	if err != nil || info.DiskTotalBytes == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f%% of %.1f GiB", 100*float64(info.DiskUsedBytes)/float64(info.DiskTotalBytes), float64(info.DiskTotalBytes)/(1<<30))
}
