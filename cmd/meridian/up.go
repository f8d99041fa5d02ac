package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/meridian-mq/meridian/tools/up"
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

Once every process serves, namespace public/default replicates across all
the regions (async, active-standby, the first region primary) and up prints
a summary: the service and admin URLs and how to produce in one region,
consume in another and kill a region by hand.

A second "up" on the same --data-dir reuses its ports and data.`,
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
			printUpSummary(os.Stdout, d.Endpoints(), plan.Options.DataDir, os.Args[0])
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
	f.BoolVar(&o.TLS, "tls", false, "TLS everywhere: a local CA and a certificate per process in DATA-DIR/tls, pulsar+ssl:// and https:// URLs, mutual TLS on every gRPC and etcd link, etcd authentication on (users named after the certificates), gossip encrypted with a generated key; clients trust DATA-DIR/tls/ca.pem")
	f.StringVar(&restart, "restart", "", "restart one process of the running deployment in --data-dir, by name")
	return cmd
}

// printUpSummary prints what a newcomer needs once the deployment is
// ready: the URLs and three copy-paste examples (consume in the last
// region, produce in the first, kill the first region). bin is how this
// binary was invoked (./bin/meridian under make run).
func printUpSummary(w io.Writer, e up.Endpoints, dataDir, bin string) {
	var names []string
	for _, r := range e.Regions {
		names = append(names, r.Name)
	}
	first, last := e.Regions[0], e.Regions[len(e.Regions)-1]
	// With TLS, every client command trusts the deployment's CA.
	tf := ""
	if e.TLSTrustCertsFile != "" {
		tf = " --tls-trust-certs-file " + e.TLSTrustCertsFile
	}
	fmt.Fprintf(w, "\nMeridian is up: regions %s; %s replicates across all of them (async, primary %s).\n",
		strings.Join(names, ", "), up.DefaultNamespace, first.Name)
	fmt.Fprintf(w, "  all regions   service URL %s\n", e.ServiceURL)
	for _, r := range e.Regions {
		fmt.Fprintf(w, "  %-13s service URL %s   admin URL %s\n", r.Name, r.ServiceURL, r.AdminURL)
	}
	fmt.Fprintf(w, "  endpoints.json (every process, its pid and address): %s\n", filepath.Join(dataDir, "endpoints.json"))
	fmt.Fprintf(w, "  data and logs: %s\n\n", dataDir)
	if len(e.Regions) > 1 {
		fmt.Fprintf(w, "Try it, in another terminal:\n")
		fmt.Fprintf(w, "1. consume in %s (leave it running; it subscribes first, so nothing is trimmed before it reads):\n", last.Name)
		fmt.Fprintf(w, "     %s consume --url %s --topic hello --subscription demo%s\n", bin, last.ServiceURL, tf)
		fmt.Fprintf(w, "2. produce in %s, in a third terminal (the messages appear in %s, with the ids %s gave them):\n", first.Name, last.Name, first.Name)
		fmt.Fprintf(w, "     %s produce --url %s --topic hello --messages 10%s\n", bin, first.ServiceURL, tf)
		fmt.Fprintf(w, "   replication status: %s admin --url %s%s replication status public/default\n", bin, first.AdminURL, tf)
	} else {
		fmt.Fprintf(w, "Try it, in another terminal:\n")
		fmt.Fprintf(w, "1. %s consume --url %s --topic hello --subscription demo%s\n", bin, first.ServiceURL, tf)
		fmt.Fprintf(w, "2. %s produce --url %s --topic hello --messages 10%s\n", bin, first.ServiceURL, tf)
	}
	var pids []string
	for _, p := range first.Processes {
		pids = append(pids, strconv.Itoa(p.Pid))
	}
	fmt.Fprintf(w, "3. kill region %s by hand (every process of it, its member of the global store included):\n", first.Name)
	fmt.Fprintf(w, "     kill -9 %s\n", strings.Join(pids, " "))
	if len(e.Regions) > 1 {
		fmt.Fprintf(w, "   %s keeps serving what was replicated on its own URL: step 1's consumer stays up, and step 2 with %s's URL produces there.\n", last.Name, last.Name)
	}
	fmt.Fprintf(w, "   Nothing restarts by itself; bring one process back with\n     %s up --data-dir %s --restart NAME   (names and pids: endpoints.json)\n", bin, dataDir)
	fmt.Fprintf(w, "Ctrl-C stops everything.\n")
}
