package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/meridian-mq/meridian/internal/up"
	"github.com/spf13/cobra"
)

func newUpCmd() *cobra.Command {
	var o up.Options
	var regions, restart string
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Run a local multi-region deployment as separate processes (etcd, global store + witness, bookies, brokers per region)",
		Long: `up starts, as separate OS processes on this machine, for each region its
etcd, its member of the global store, its bookies (spread over racks) and
its brokers, plus the global store's witness. It writes DIR/endpoints.json
and stops every child on SIGINT/SIGTERM; it never restarts a dead process
by itself. "meridian up --restart NAME" asks the running deployment to
bring one process back on the same data.

A second "up" on the same --data-dir reuses its ports and data. The
regions do not replicate to each other yet (the geo-replication issue).`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if restart != "" {
				return up.RequestRestart(o.DataDir, restart)
			}
			o.Regions = splitList(regions)
			bin, err := os.Executable()
			if err != nil {
				return err
			}
			log := logger()
			plan, err := up.LoadPlan(o.DataDir)
			if errors.Is(err, fs.ErrNotExist) {
				plan, err = up.NewPlan(o)
			}
			if err != nil {
				return err
			}
			ctx, stop := signalContext()
			defer stop()
			d, err := up.Start(ctx, plan, bin, log)
			if err != nil {
				return err
			}
			e := d.Endpoints()
			fmt.Printf("Meridian is up: %d regions, data and logs in %s\n", len(e.Regions), plan.Options.DataDir)
			for _, r := range e.Regions {
				fmt.Printf("  %-6s service URL %s   admin %s\n", r.Name, r.ServiceURL, r.AdminURL)
			}
			fmt.Printf("  all regions: %s\n", e.ServiceURL)
			fmt.Printf("  endpoints:   %s\n", filepath.Join(plan.Options.DataDir, "endpoints.json"))
			fmt.Printf("Kill a process by hand (kill -9 PID from endpoints.json); bring it back with\n  meridian up --data-dir %s --restart NAME\nCtrl-C stops everything.\n", plan.Options.DataDir)
			<-ctx.Done()
			fmt.Println("stopping ...")
			d.Stop(15 * time.Second)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&regions, "regions", "east,west", "regions, comma-separated")
	f.IntVar(&o.BrokersPerRegion, "brokers-per-region", 2, "brokers per region")
	f.IntVar(&o.BookiesPerRegion, "bookies-per-region", 4, "bookies per region (E=3 needs 3; one more keeps a replacement)")
	f.IntVar(&o.RacksPerRegion, "racks-per-region", 3, "racks per region")
	f.StringVar(&o.DataDir, "data-dir", "./data/up", "data, logs, plan.json and endpoints.json")
	f.StringVar(&o.OwnershipTTL, "ownership-ttl", "", "brokers' bundle ownership lease (e.g. 5s)")
	f.StringVar(&restart, "restart", "", "restart one process of the running deployment in --data-dir, by name")
	return cmd
}
