package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/meridian-mq/meridian/drill"
	"github.com/meridian-mq/meridian/scenarios"
	"github.com/spf13/cobra"
)

func newDrillCmd() *cobra.Command {
	var out string
	var seed uint64
	var list bool
	cmd := &cobra.Command{
		Use:   "drill FILE|NAME",
		Short: "Run a disaster drill: a topology, a workload, real faults, a checker and an RPO/RTO report",
		Long: `Runs a drill file (YAML; scenarios/ holds the shipped ones, which can be
named without a path): starts its topology as separate processes (as
'meridian up' does), runs its workload of pulsar-client-go producers and
consumers, applies its faults (kill -9, SIGSTOP, restarts, partitions),
heals, drains, and checks every acknowledged message against what the
consumers received. Writes DIR/report.json, DIR/report.md and
DIR/timeline.svg, and the workload's receipt and delivery logs. Exits
non-zero unless every expectation of the file holds; the deployment's data
is then kept in DIR/data for a replay (--seed).`,
		Args: func(cmd *cobra.Command, args []string) error {
			if list {
				return nil
			}
			return cobra.ExactArgs(1)(cmd, args)
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if list {
				names, err := scenarios.Names()
				if err != nil {
					return err
				}
				for _, n := range names {
					b, _ := scenarios.Files.ReadFile(n + ".yaml")
					s, err := drill.Parse(b)
					desc := ""
					if err == nil {
						desc = strings.SplitN(strings.TrimSpace(s.Description), "\n", 2)[0]
					}
					fmt.Fprintf(cmd.OutOrStdout(), "%-28s %s\n", n, desc)
				}
				return nil
			}
			s, err := loadDrill(args[0])
			if err != nil {
				return err
			}
			if out == "" {
				out = filepath.Join("drill-out", s.Name+"-"+time.Now().UTC().Format("20060102-150405"))
			}
			ctx, stop := signalContext()
			defer stop()
			rep, err := drill.Run(ctx, s, drill.Options{Out: out, Seed: seed, Progress: os.Stderr})
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), rep.Summary())
			for _, v := range rep.Verdicts {
				mark := "ok  "
				if !v.Pass {
					mark = "FAIL"
				}
				fmt.Fprintf(cmd.OutOrStdout(), "  %s %s: %s (expected %s)%s\n", mark, v.Name, v.Actual, v.Expr, errSuffix(v.Err))
			}
			fmt.Fprintf(cmd.OutOrStdout(), "report: %s\n", filepath.Join(out, "report.md"))
			if !rep.Pass {
				return fmt.Errorf("drill %s failed its expectations (data kept in %s, seed %d)", s.Name, rep.DataDir, rep.Seed)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&out, "out", "", "output directory (default drill-out/NAME-TIME)")
	f.Uint64Var(&seed, "seed", 0, "seed of the workload's choices (default: random, printed in the report)")
	f.BoolVar(&list, "list", false, "list the shipped drills")
	return cmd
}

func errSuffix(e string) string {
	if e == "" {
		return ""
	}
	return " — " + e
}

// loadDrill reads a drill file, or a shipped drill by name.
func loadDrill(arg string) (*drill.Scenario, error) {
	if _, err := os.Stat(arg); err == nil {
		return drill.Load(arg)
	}
	b, err := scenarios.Files.ReadFile(strings.TrimSuffix(arg, ".yaml") + ".yaml")
	if err != nil {
		names, _ := scenarios.Names()
		return nil, errors.New("no drill file " + arg + " (shipped drills: " + strings.Join(names, ", ") + ")")
	}
	return drill.Parse(b)
}
