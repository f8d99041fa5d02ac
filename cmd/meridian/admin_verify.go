package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	neturl "net/url"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/meridian-mq/meridian/broker/replication"
	"github.com/meridian-mq/meridian/replicator"
)

// errNotClean is verify's error when the regions disagree: the report is
// printed, and the command exits non-zero (drills and scripts check it).
var errNotClean = errors.New("replication verify: the regions do not hold the same entries")

// newVerifyCmd is `admin replication verify`: GET
// /admin/v2/meridian/replication/verify/TENANT/NS[/TOPIC] on any broker;
// that broker reads every region's copy (broker/replication/verify.go).
func newVerifyCmd(do func(method, path string, body any) ([]byte, error)) *cobra.Command {
	var raw bool
	var settle time.Duration
	c := &cobra.Command{
		Use:   "verify TENANT/NS|TOPIC",
		Short: "Compare what every region holds of each origin region's entries, and report what is missing, extra, different or trimmed",
		Long: `verify compares, for each origin region of the namespace, what every region
holds of the entries published there: the dense per-origin sequence
numbers, and a digest per entry over its origin id, key, properties, event
time and payload (docs/georep.md, "Verifying replication"). One row per
(topic, origin, region):

  THROUGH     the origin's sequence numbers compared: 1..THROUGH
  COMPARED    entries both hold, compared by digest
  MISSING     held by the origin, not by the region
  EXTRA       held by the region, not by the origin (orphans)
  MISMATCHED  held by both, with different contents
  TRIMMED     held by one side only, below what the other side's
              retention still keeps (not missing)
  NOT-REPL    at or below the base of the replication stream to the region
              (startAt latest, or a resync's declared loss)

then every range with the origin message ids of its first and last
entries. It exits 1 when anything is missing, extra or mismatched, or a
region could not be read. While producers publish, the newest entries are
still on their way: --settle 5s leaves out what an origin published in the
last 5 s.

TOPIC is persistent://tenant/ns/topic or tenant/ns/topic.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, a []string) error {
			target := strings.TrimPrefix(replFilter(a[0]), "persistent://")
			path := "/admin/v2/meridian/replication/verify/" + target + "?settle=" + neturl.QueryEscape(settle.String())
			out, err := do("GET", path, nil)
			if err != nil {
				return err
			}
			var rep replication.VerifyReport
			if err := json.Unmarshal(out, &rep); err != nil {
				return fmt.Errorf("replication verify: %w", err)
			}
			if raw {
				os.Stdout.Write(out)
				if len(out) > 0 && out[len(out)-1] != '\n' {
					fmt.Println()
				}
			} else {
				printVerify(os.Stdout, rep)
			}
			if !rep.Clean {
				cmd.SilenceUsage = true
				return errNotClean
			}
			return nil
		},
	}
	c.Flags().BoolVar(&raw, "json", false, "print the raw JSON report")
	c.Flags().DurationVar(&settle, "settle", 0, "leave out the entries an origin published within this time (still in flight)")
	return c
}

func printVerify(w io.Writer, rep replication.VerifyReport) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TOPIC\tORIGIN\tREGION\tTHROUGH\tCOMPARED\tMISSING\tEXTRA\tMISMATCHED\tTRIMMED\tNOT-REPL")
	var lines []string
	rangeLines := func(topic, origin, region, kind string, rs []replicator.VerifyRange) {
		for _, r := range rs {
			lines = append(lines, fmt.Sprintf("%s %s→%s %s: seq %d..%d (%d), origin ids %s..%s", topic, origin, region, kind, r.From, r.To, r.Len(), r.FirstID, r.LastID))
		}
	}
	for _, t := range rep.Topics {
		for _, o := range t.Origins {
			for _, r := range o.Regions {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\n", t.Topic, o.Origin, r.Region, o.Through, r.Compared,
					r.MissingEntries, r.ExtraEntries, r.MismatchedEntries, r.TrimmedEntries, r.NotReplicatedEntries)
				rangeLines(t.Topic, o.Origin, r.Region, "missing", r.Missing)
				rangeLines(t.Topic, o.Origin, r.Region, "extra", r.Extra)
				rangeLines(t.Topic, o.Origin, r.Region, "mismatched", r.Mismatched)
				for _, tr := range r.Trimmed {
					rangeLines(t.Topic, o.Origin, r.Region, "trimmed by "+tr.Side, []replicator.VerifyRange{tr.VerifyRange})
				}
				rangeLines(t.Topic, o.Origin, r.Region, "not replicated", r.NotReplicated)
			}
		}
		for region, why := range t.Unreachable {
			lines = append(lines, fmt.Sprintf("%s: region %s not read: %s", t.Topic, region, why))
		}
	}
	tw.Flush()
	for _, l := range lines {
		fmt.Fprintln(w, l)
	}
	verdict := "clean"
	if !rep.Clean {
		verdict = "NOT CLEAN"
	}
	fmt.Fprintf(w, "%s: %d topics, regions %s: %d compared, %d missing, %d extra, %d mismatched, %d trimmed, %d not replicated; %s\n",
		rep.Target, len(rep.Topics), strings.Join(rep.Regions, ","), rep.Compared, rep.Missing, rep.Extra, rep.Mismatched, rep.Trimmed, rep.NotReplicated, verdict)
}
