package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/meridian-mq/meridian/bookie/autorecovery"
	"github.com/meridian-mq/meridian/bookie/ledger"
	"github.com/meridian-mq/meridian/cluster"
	"github.com/meridian-mq/meridian/internal/tlsutil"
	"github.com/meridian-mq/meridian/proto/bookiepb"
	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// `meridian admin bookies list` and `meridian admin recovery status` read
// the region's etcd (and ask each bookie for its disk usage).
func newAdminStorageCmds() []*cobra.Command {
	var etcd, region string
	// On a TLS deployment: etcd over mutual TLS (with etcd
	// authentication), and the bookies asked over mutual TLS too.
	var sec securityFlags
	var tlsSrc *tlsutil.Source
	connect := func(ctx context.Context, cmd *cobra.Command) (*cluster.Store, error) {
		secfc := sec.settings()
		src, err := secfc.tlsSource()
		if err != nil {
			return nil, err
		}
		tlsSrc = src
		return secfc.connectStore(ctx, splitList(etcd), regionPrefix("", region), src)
	}
	flags := func(c *cobra.Command) {
		c.Flags().StringVar(&etcd, "etcd", "http://127.0.0.1:2379", "the region's etcd endpoints")
		c.Flags().StringVar(&region, "region", "default", "the region")
		sec.registerTLS(c)
	}
	bookies := &cobra.Command{Use: "bookies", Short: "Bookies of a region"}
	list := &cobra.Command{
		Use:   "list",
		Short: "Each bookie's region, rack, state, disk usage and fragment count",
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), 60*time.Second)
			defer cancel()
			s, err := connect(ctx, cmd)
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
			decs, err := cluster.ListDecommissions(ctx, s)
			if err != nil {
				return err
			}
			dec := map[string]cluster.DecommissionState{}
			for _, d := range decs {
				dec[d.BookieID] = d.State
			}
			tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tADDR\tREGION\tRACK\tSTATE\tDISK USED\tFRAGMENTS")
			seen := map[string]bool{}
			for _, b := range view.Bookies(false) {
				seen[b.Reg.Id] = true
				state := string(b.State)
				if d := dec[b.Reg.Id]; d != cluster.DecommissionNone {
					state = string(d) // draining (read-only, its fragments moving off)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\n", b.Reg.Id, b.Reg.Addr, b.Reg.Region, b.Reg.Rack, state, diskUsage(ctx, b.Reg.Addr, tlsSrc), frags[b.Reg.Id])
			}
			var gone []string
			for id := range frags {
				if !seen[id] {
					gone = append(gone, id)
				}
			}
			for id, d := range dec {
				if !seen[id] && frags[id] == 0 && d == cluster.DecommissionRemoved {
					gone = append(gone, id)
				}
			}
			sort.Strings(gone)
			for _, id := range gone {
				state := "not-registered"
				if d := dec[id]; d != cluster.DecommissionNone {
					state = string(d)
				}
				fmt.Fprintf(tw, "%s\t-\t-\t-\t%s\t-\t%d\n", id, state, frags[id])
			}
			return tw.Flush()
		},
	}
	flags(list)
	bookies.AddCommand(list)

	var noWait bool
	var timeout time.Duration
	decommission := &cobra.Command{
		Use:   "decommission BOOKIE",
		Short: "Drain a bookie: it turns read-only, its fragments are re-replicated elsewhere, then it is removed (progress shown)",
		Long: `decommission writes a durable decommission record for BOOKIE in the
region's etcd. The bookie turns read-only at once (writers replace it in
their ensembles; it keeps serving reads), and auto-recovery (in the brokers,
or meridian autorecovery) copies every fragment that names it to other
bookies under the placement rule. When no fragment names it any more the
record moves to removed: the bookie deregisters and its process exits; it
will not start again until ` + "`meridian admin bookies recommission BOOKIE`" + `.
Without --no-wait the command shows progress until then.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id := args[0]
			ctx := cmd.Context()
			if timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, timeout)
				defer cancel()
			}
			s, err := connect(ctx, cmd)
			if err != nil {
				return err
			}
			defer s.Close()
			frags, err := fragmentsPerBookie(ctx, s)
			if err != nil {
				return err
			}
			_, regErr := s.Get(ctx, "/bookies/writable/"+id)
			_, roErr := s.Get(ctx, "/bookies/readonly/"+id)
			if _, had := frags[id]; !had && regErr != nil && roErr != nil {
				if _, found, _ := cluster.GetDecommission(ctx, s, id); !found {
					return fmt.Errorf("no bookie %q in region %s (not registered, in no ledger)", id, region)
				}
			}
			d, err := cluster.StartDecommission(ctx, s, id, frags[id])
			if err != nil {
				return err
			}
			fmt.Printf("decommissioning %s: %s, %d fragment(s) named it at the start\n", id, d.State, d.FragmentsAtStart)
			if noWait {
				return nil
			}
			return waitDrained(ctx, s, d)
		},
	}
	decommission.Flags().BoolVar(&noWait, "no-wait", false, "start the drain and return")
	decommission.Flags().DurationVar(&timeout, "timeout", 0, "give up waiting after this long (the drain goes on; 0: wait until removed)")
	flags(decommission)
	recommission := &cobra.Command{
		Use:   "recommission BOOKIE",
		Short: "Cancel a bookie's decommission: a draining bookie turns writable, a removed one may start again",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), 30*time.Second)
			defer cancel()
			s, err := connect(ctx, cmd)
			if err != nil {
				return err
			}
			defer s.Close()
			if err := cluster.CancelDecommission(ctx, s, args[0]); err != nil {
				return err
			}
			fmt.Printf("%s: decommission cancelled\n", args[0])
			return nil
		},
	}
	flags(recommission)
	bookies.AddCommand(decommission, recommission)

	recovery := &cobra.Command{Use: "recovery", Short: "Auto-recovery"}
	var asJSON bool
	status := &cobra.Command{
		Use:   "status",
		Short: "Auto-recovery's state: lost and draining bookies, under-replicated ledgers, copy rate, time to full replication",
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), 30*time.Second)
			defer cancel()
			s, err := connect(ctx, cmd)
			if err != nil {
				return err
			}
			defer s.Close()
			st, err := autorecovery.ReadStatus(ctx, s)
			if err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(os.Stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(st)
			}
			printRecoveryStatus(ctx, s, st)
			return nil
		},
	}
	status.Flags().BoolVar(&asJSON, "json", false, "print the status as JSON")
	flags(status)
	recovery.AddCommand(status)
	return []*cobra.Command{bookies, recovery}
}

// printRecoveryStatus prints st for people.
func printRecoveryStatus(ctx context.Context, s *cluster.Store, st autorecovery.Status) {
	ms := st.Markers
	entries := int64(0)
	frags := 0
	for _, m := range ms {
		entries += m.Entries
		frags += len(m.Fragments) + len(m.Misplaced)
	}
	fmt.Printf("%d under-replicated ledger(s), %d fragment(s), %d entries\n", len(ms), frags, entries)
	ago := func(ms int64) string { return time.Since(time.UnixMilli(ms)).Round(time.Second).String() }
	if a := st.Auditor; a != nil {
		fmt.Printf("auditor: %s (status %s old), lost-bookie delay %s, %d scan(s), last %s ago, misplaced fragments %d\n",
			a.Auditor, ago(a.UpdatedMs), time.Duration(a.LostBookieDelayMs)*time.Millisecond, a.Scans, ago(a.LastScanMs), a.Misplaced)
		if a.ScanStartedMs > 0 {
			fmt.Printf("a scan is running, for %s\n", ago(a.ScanStartedMs))
		}
		fmt.Printf("lost bookies: %s; draining: %s\n", listOrDash(a.Lost), listOrDash(a.Draining))
		for id, since := range a.Absent {
			fmt.Printf("absent (the delay is running): %s for %s\n", id, ago(since))
		}
		if a.EpisodeStartMs > 0 {
			fmt.Printf("under-replicated for %s\n", ago(a.EpisodeStartMs))
		}
		if a.LastFullReplicationAtMs > 0 {
			fmt.Printf("last time to full replication: %.1fs (ended %s ago)\n", a.LastFullReplicationSeconds, ago(a.LastFullReplicationAtMs))
		}
	} else {
		fmt.Println("auditor: none has run in this region (brokers run one unless --autorecovery=false; or run meridian autorecovery)")
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	if len(st.Workers) > 0 {
		fmt.Fprintln(tw, "WORKER\tCOPIED ENTRIES\tCOPIED MiB\tRATE MiB/s\tFRAGMENTS\tLEDGERS\tRECOVERED\tFAILURES\tCURRENT")
		for _, w := range st.Workers {
			cur := "-"
			if w.Current != 0 {
				cur = fmt.Sprint(w.Current)
			}
			fmt.Fprintf(tw, "%s\t%d\t%.1f\t%.2f\t%d\t%d\t%d\t%d\t%s\n", w.ID, w.Entries, float64(w.Bytes)/(1<<20), w.CopyBytesPerSec/(1<<20),
				w.Fragments, w.Ledgers, w.Recovered, w.Failures, cur)
		}
		tw.Flush()
	}
	if len(ms) > 0 {
		fmt.Fprintln(tw, "LEDGER\tSTATE\tLOST BOOKIES\tFRAGMENTS\tMISPLACED\tENTRIES\tWAITING")
		for _, m := range ms {
			state := "?"
			if md, err := ledger.ReadMetadata(ctx, s, m.LedgerID); err == nil {
				state = md.Meta.State.String()
				if state == "OPEN" {
					state = "OPEN (writer " + md.Meta.Writer + ")"
				}
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%d\t%d\t%s\n", m.LedgerID, state, listOrDash(m.Lost), len(m.Fragments), len(m.Misplaced), m.Entries,
				time.Since(time.UnixMilli(m.CtimeMs)).Round(time.Second))
		}
		tw.Flush()
	}
	if len(st.Decommissions) > 0 {
		fmt.Fprintln(tw, "DECOMMISSION\tSTATE\tFRAGMENTS AT START\tSTARTED")
		for _, d := range st.Decommissions {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s ago\n", d.BookieID, d.State, d.FragmentsAtStart, ago(d.StartedMs))
		}
		tw.Flush()
	}
}

func listOrDash(l []string) string {
	if len(l) == 0 {
		return "-"
	}
	return strings.Join(l, ",")
}

// waitDrained shows a decommission's progress until no fragment names the
// bookie, then moves its record to removed and waits for it to deregister.
func waitDrained(ctx context.Context, s *cluster.Store, d cluster.Decommission) error {
	id := d.BookieID
	start := time.Now()
	last := ""
	warned := false
	for {
		frags, err := fragmentsPerBookie(ctx, s)
		if err != nil {
			return err
		}
		left := frags[id]
		st, err := autorecovery.ReadStatus(ctx, s)
		if err != nil {
			return err
		}
		marked := 0
		for _, m := range st.Markers {
			if slices.Contains(m.Lost, id) {
				marked++
			}
		}
		rate, copied := 0.0, int64(0)
		for _, w := range st.Workers {
			rate += w.CopyBytesPerSec
			copied += w.Entries
		}
		line := fmt.Sprintf("%s: %d of %d fragment(s) left, %d ledger(s) queued; workers copying %.2f MiB/s", id, left, d.FragmentsAtStart, marked, rate/(1<<20))
		if line != last {
			fmt.Printf("[%s] %s\n", time.Since(start).Round(time.Second), line)
			last = line
		}
		if left == 0 && marked == 0 {
			break
		}
		if !warned && time.Since(start) > 10*time.Second && (st.Auditor == nil || time.Since(time.UnixMilli(st.Auditor.UpdatedMs)) > time.Minute) {
			warned = true
			fmt.Println("warning: no auditor is running in this region: nothing will move (brokers run one unless --autorecovery=false; or run meridian autorecovery)")
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("stopped waiting (the drain goes on): %w", ctx.Err())
		case <-time.After(time.Second):
		}
	}
	if err := cluster.MarkDecommissionRemoved(ctx, s, id); err != nil {
		return err
	}
	fmt.Printf("[%s] %s: no fragment names it; removing\n", time.Since(start).Round(time.Second), id)
	for {
		_, e1 := s.Get(ctx, "/bookies/writable/"+id)
		_, e2 := s.Get(ctx, "/bookies/readonly/"+id)
		if errors.Is(e1, cluster.ErrNotFound) && errors.Is(e2, cluster.ErrNotFound) {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s was marked removed but is still registered: %w", id, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
	fmt.Printf("[%s] %s: removed (deregistered; its process stops)\n", time.Since(start).Round(time.Second), id)
	return nil
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
func diskUsage(ctx context.Context, addr string, src *tlsutil.Source) string {
	creds := grpc.WithTransportCredentials(insecure.NewCredentials())
	if src != nil {
		creds = grpc.WithTransportCredentials(src.GRPCClient())
	}
	cc, err := grpc.NewClient(addr, creds)
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
