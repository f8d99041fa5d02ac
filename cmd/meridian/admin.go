package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	neturl "net/url"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
)

// meridian admin: a CLI over the admin HTTP API (Pulsar's /admin/v2 paths).
func newAdminCmd() *cobra.Command {
	var url string
	cmd := &cobra.Command{Use: "admin", Short: "Administer tenants, namespaces, topics and subscriptions over the admin API"}
	cmd.PersistentFlags().StringVar(&url, "url", "http://127.0.0.1:8080", "admin API URL of any broker")
	var cf clientFlags
	cf.register(cmd.PersistentFlags())
	// do sends one request and returns the answer's body; an HTTP error
	// becomes an error with the broker's reason.
	var preferAsync bool // the next request asks for 202 (Prefer: respond-async)
	do := func(method, path string, body any) ([]byte, error) {
		var rd io.Reader
		if body != nil {
			b, err := json.Marshal(body)
			if err != nil {
				return nil, err
			}
			rd = bytes.NewReader(b)
		}
		req, err := http.NewRequest(method, strings.TrimRight(url, "/")+path, rd)
		if err != nil {
			return nil, err
		}
		req.Header.Set("Content-Type", "application/json")
		if preferAsync {
			req.Header.Set("Prefer", "respond-async")
		}
		if err := cf.authorize(req); err != nil {
			return nil, err
		}
		hc, err := cf.httpClient(60 * time.Second)
		if err != nil {
			return nil, err
		}
		resp, err := hc.Do(req)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		if resp.StatusCode >= 300 {
			var e struct{ Reason string }
			if json.Unmarshal(out, &e) == nil && e.Reason != "" {
				return nil, fmt.Errorf("%s (HTTP %d)", e.Reason, resp.StatusCode)
			}
			return nil, fmt.Errorf("HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(out)))
		}
		return out, nil
	}
	call := func(method, path string, body any) error {
		out, err := do(method, path, body)
		if err != nil {
			return err
		}
		if len(out) > 0 {
			var v any
			if json.Unmarshal(out, &v) == nil {
				pretty, _ := json.MarshalIndent(v, "", "  ")
				fmt.Fprintln(os.Stdout, string(pretty))
			} else {
				os.Stdout.Write(out)
			}
		}
		return nil
	}
	sub := func(parent *cobra.Command, use, short string, args int, run func(a []string) error) *cobra.Command {
		c := &cobra.Command{Use: use, Short: short, Args: cobra.ExactArgs(args), RunE: func(_ *cobra.Command, a []string) error { return run(a) }}
		parent.AddCommand(c)
		return c
	}
	topicPath := func(t string) (string, error) {
		t = strings.TrimPrefix(t, "persistent://")
		parts := strings.Split(t, "/")
		if len(parts) == 1 {
			parts = []string{"public", "default", parts[0]}
		}
		if len(parts) != 3 {
			return "", fmt.Errorf("topic %q: want persistent://tenant/namespace/topic", t)
		}
		return "/admin/v2/persistent/" + strings.Join(parts, "/"), nil
	}

	tenants := &cobra.Command{Use: "tenants", Short: "Tenants"}
	sub(tenants, "list", "List tenants", 0, func(a []string) error { return call("GET", "/admin/v2/tenants", nil) })
	sub(tenants, "get TENANT", "Show a tenant", 1, func(a []string) error { return call("GET", "/admin/v2/tenants/"+a[0], nil) })
	var adminRoles, allowedClusters string
	for _, verb := range []struct{ use, short, method string }{
		{"create TENANT", "Create a tenant", "PUT"},
		{"update TENANT", "Replace a tenant's admin roles and allowed clusters", "POST"},
	} {
		c := sub(tenants, verb.use, verb.short, 1, func(a []string) error {
			return call(verb.method, "/admin/v2/tenants/"+a[0], map[string]any{"adminRoles": orEmpty(splitList(adminRoles)), "allowedClusters": orEmpty(splitList(allowedClusters))})
		})
		c.Flags().StringVarP(&adminRoles, "admin-roles", "r", "", "roles that administer the tenant, comma-separated")
		c.Flags().StringVarP(&allowedClusters, "allowed-clusters", "c", "", "regions the tenant may use, comma-separated")
	}
	sub(tenants, "delete TENANT", "Delete a tenant without namespaces", 1, func(a []string) error { return call("DELETE", "/admin/v2/tenants/"+a[0], nil) })

	namespaces := &cobra.Command{Use: "namespaces", Short: "Namespaces and their policies"}
	sub(namespaces, "list TENANT", "List a tenant's namespaces", 1, func(a []string) error { return call("GET", "/admin/v2/namespaces/"+a[0], nil) })
	var rf replFlags
	create := &cobra.Command{
		Use:   "create TENANT/NS",
		Short: "Create a namespace (with its regions and replication policy)",
		Args:  cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, a []string) error {
			u, err := rf.update(c)
			if err != nil {
				return err
			}
			body := map[string]any{}
			if u.Regions != nil {
				body["replication_clusters"] = *u.Regions
			}
			if rp := u.policy(); len(rp) > 0 {
				body["meridian_replication"] = rp
			}
			return call("PUT", "/admin/v2/namespaces/"+a[0], body)
		},
	}
	rf.register(create)
	update := &cobra.Command{
		Use:   "update TENANT/NS",
		Short: "Change a namespace's regions and replication policy (only the flags given change)",
		Args:  cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, a []string) error {
			u, err := rf.update(c)
			if err != nil {
				return err
			}
			body := u.policy()
			if u.Regions != nil {
				body["regions"] = *u.Regions
			}
			if len(body) == 0 {
				return fmt.Errorf("nothing to update: give at least one of --regions, --replication, --failover, --primary, --sync-on-unreachable, --sync-timeout, --min-regions, --start-at, --replication-backlog-quota, --replication-rate, --failover-delay, --switch-back-delay, --orphans, --max-replication-lag, --max-replication-lag-bytes, --max-replication-lag-action")
			}
			return call("POST", "/admin/v2/namespaces/"+a[0]+"/meridian-replication", body)
		},
	}
	rf.register(update)
	namespaces.AddCommand(create, update)
	sub(namespaces, "get TENANT/NS", "Show a namespace's policies as JSON", 1, func(a []string) error { return call("GET", "/admin/v2/namespaces/"+a[0], nil) })
	sub(namespaces, "delete TENANT/NS", "Delete a namespace without topics", 1, func(a []string) error { return call("DELETE", "/admin/v2/namespaces/"+a[0], nil) })
	sub(namespaces, "topics TENANT/NS", "List a namespace's topics", 1, func(a []string) error { return call("GET", "/admin/v2/namespaces/"+a[0]+"/topics", nil) })
	var retMin, retMB int64
	ret := sub(namespaces, "set-retention TENANT/NS", "Keep consumed data (-1 = unlimited)", 1, func(a []string) error {
		return call("POST", "/admin/v2/namespaces/"+a[0]+"/retention", map[string]int64{"retentionTimeInMinutes": retMin, "retentionSizeInMB": retMB})
	})
	ret.Flags().Int64Var(&retMin, "time-minutes", 0, "retention time in minutes")
	ret.Flags().Int64Var(&retMB, "size-mb", 0, "retention size in MB")
	sub(namespaces, "set-message-ttl TENANT/NS SECONDS", "Expire unconsumed messages after SECONDS", 2, func(a []string) error {
		n, err := strconv.Atoi(a[1])
		if err != nil {
			return err
		}
		return call("POST", "/admin/v2/namespaces/"+a[0]+"/messageTTL", n)
	})
	var quotaBytes int64
	var quotaPolicy string
	bq := sub(namespaces, "set-backlog-quota TENANT/NS", "Limit a subscription's backlog", 1, func(a []string) error {
		return call("POST", "/admin/v2/namespaces/"+a[0]+"/backlogQuota", map[string]any{"limit": quotaBytes, "policy": quotaPolicy})
	})
	bq.Flags().Int64Var(&quotaBytes, "limit-bytes", 10<<30, "backlog limit in bytes")
	bq.Flags().StringVar(&quotaPolicy, "policy", "producer_request_hold", "producer_request_hold | producer_exception | consumer_backlog_eviction")

	topics := &cobra.Command{Use: "topics", Short: "Topics"}
	sub(topics, "list TENANT/NS", "List topics", 1, func(a []string) error { return call("GET", "/admin/v2/persistent/"+a[0], nil) })
	sub(topics, "create TOPIC", "Create a non-partitioned topic", 1, func(a []string) error {
		p, err := topicPath(a[0])
		if err != nil {
			return err
		}
		return call("PUT", p, nil)
	})
	sub(topics, "create-partitioned-topic TOPIC PARTITIONS", "Create a partitioned topic", 2, func(a []string) error {
		p, err := topicPath(a[0])
		if err != nil {
			return err
		}
		n, err := strconv.Atoi(a[1])
		if err != nil {
			return err
		}
		return call("PUT", p+"/partitions", n)
	})
	sub(topics, "delete TOPIC", "Delete a topic and its data", 1, func(a []string) error {
		p, err := topicPath(a[0])
		if err != nil {
			return err
		}
		return call("DELETE", p+"?force=true", nil)
	})
	sub(topics, "stats TOPIC", "Show a topic's stats (backlog, publishers, subscriptions)", 1, func(a []string) error {
		p, err := topicPath(a[0])
		if err != nil {
			return err
		}
		return call("GET", p+"/stats", nil)
	})

	subs := &cobra.Command{Use: "subscriptions", Short: "Subscriptions"}
	sub(subs, "list TOPIC", "List subscriptions", 1, func(a []string) error {
		p, err := topicPath(a[0])
		if err != nil {
			return err
		}
		return call("GET", p+"/subscriptions", nil)
	})
	sub(subs, "create TOPIC SUBSCRIPTION", "Create a durable subscription at the end of the topic", 2, func(a []string) error {
		p, err := topicPath(a[0])
		if err != nil {
			return err
		}
		return call("PUT", p+"/subscription/"+a[1], nil)
	})
	sub(subs, "delete TOPIC SUBSCRIPTION", "Delete a subscription", 2, func(a []string) error {
		p, err := topicPath(a[0])
		if err != nil {
			return err
		}
		return call("DELETE", p+"/subscription/"+a[1]+"?force=true", nil)
	})
	sub(subs, "reset-cursor TOPIC SUBSCRIPTION UNIX-MS", "Move a subscription to the first message published at or after a time", 3, func(a []string) error {
		p, err := topicPath(a[0])
		if err != nil {
			return err
		}
		return call("POST", p+"/subscription/"+a[1]+"/resetcursor/"+a[2], nil)
	})
	regions := &cobra.Command{Use: "regions", Short: "Regions registered in the global store"}
	sub(regions, "list", "List the registered regions", 0, func(a []string) error { return call("GET", "/admin/v2/clusters", nil) })
	var to, reason, fromRegion string
	var planned, dryRun bool
	var drainTimeout time.Duration
	failover := &cobra.Command{
		Use:   "failover TENANT/NS --to REGION | failover --region R --to REGION --planned",
		Short: "Make REGION the active region of an active-standby namespace (or of every one active in a region) now (drills, maintenance)",
		Long: `failover moves an active-standby namespace to REGION: the global store's
record of its active region goes to the next epoch (compare-and-swap, so
one region is active per epoch); the old active region's brokers close the
namespace's producers and consumers and redirect their lookups, so
unmodified clients with a multi-region service URL land in REGION.
Async replication: what the old region acknowledged and had not
replicated yet is not in REGION.

With --planned (a switchover, for maintenance), ask a broker of the active
region: it holds the namespace's produce (sends wait: a pause, not errors)
and dispatch, waits until every topic's replication backlog and every
subscription's exact position reached REGION and every delivery was
acknowledged, then commits one epoch for the whole namespace and releases
the clients towards REGION. If that does not finish within --timeout, it
aborts and the old region stays active and serving. --dry-run prints the
pre-flight instead.

With --region R instead of TENANT/NS (region-wide, for maintenance of R;
--planned only), ask a broker of R: it moves every active-standby
namespace active in R to REGION by the planned path, one at a time in
name order, each with its own --timeout. The first abort ends the run:
the namespaces moved before it stay moved, it and the rest stay active in
R (reported "aborted" and "not started"); a namespace whose regions do
not include REGION is reported "skipped". --dry-run lists what would
move, with each namespace's pre-flight.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(_ *cobra.Command, a []string) error {
			if to == "" {
				return fmt.Errorf("--to REGION is required")
			}
			if dryRun && !planned {
				return fmt.Errorf("--dry-run is the pre-flight of --planned: give both")
			}
			if fromRegion != "" {
				if len(a) != 0 {
					return fmt.Errorf("give TENANT/NS or --region, not both")
				}
				if !planned {
					return fmt.Errorf("--region is a planned switchover of every namespace active there: give --planned")
				}
				if drainTimeout < 0 {
					return fmt.Errorf("--timeout %s: want > 0", drainTimeout)
				}
				body := map[string]any{"region": fromRegion, "to": to, "planned": true, "dryRun": dryRun, "timeoutMs": drainTimeout.Milliseconds()}
				if reason != "manual" {
					body["reason"] = reason
				}
				return runAsync(do, &preferAsync, "/admin/v2/meridian/failover", body)
			}
			if len(a) != 1 {
				return fmt.Errorf("give the namespace TENANT/NS (or --region R for every namespace active there)")
			}
			if !planned {
				return call("POST", "/admin/v2/meridian/failover/"+a[0], map[string]string{"to": to, "reason": reason})
			}
			if drainTimeout < 0 {
				return fmt.Errorf("--timeout %s: want > 0", drainTimeout)
			}
			if reason == "manual" {
				reason = "planned switchover"
			}
			body := map[string]any{"to": to, "reason": reason, "planned": true, "dryRun": dryRun, "timeoutMs": drainTimeout.Milliseconds()}
			return runAsync(do, &preferAsync, "/admin/v2/meridian/failover/"+a[0], body)
		},
	}
	failover.Flags().StringVar(&to, "to", "", "the region to make active")
	failover.Flags().StringVar(&fromRegion, "region", "", "with --planned and no TENANT/NS: move every active-standby namespace active in this region to --to, one at a time (run it against a broker of this region)")
	failover.Flags().StringVar(&reason, "reason", "manual", "recorded with the new epoch")
	failover.Flags().BoolVar(&planned, "planned", false, "a planned switchover, for a namespace whose active region is up: hold produce, drain every topic's replication and subscription positions to REGION, then commit (nothing lost, nothing delivered twice, even async); run it against a broker of the active region")
	failover.Flags().BoolVar(&dryRun, "dry-run", false, "with --planned: print the pre-flight (per topic the replication backlog and lag, what an unplanned failover would lose now, the expected pause) and move nothing")
	failover.Flags().DurationVar(&drainTimeout, "timeout", 30*time.Second, "with --planned: abort (the old region stays active and serving) if the drain has not finished by then")
	failover.AddCommand(&cobra.Command{Use: "status [TENANT/NS]", Short: "Show the active region and epoch of active-standby namespaces",
		Args: cobra.MaximumNArgs(1), RunE: func(_ *cobra.Command, a []string) error {
			if len(a) == 1 {
				return call("GET", "/admin/v2/meridian/failover/"+a[0], nil)
			}
			return call("GET", "/admin/v2/meridian/failover", nil)
		}})
	var republish bool
	var orphanTopic string
	orphans := &cobra.Command{Use: "orphans TENANT/NS",
		Short: "List the messages an old active region acknowledged and had not replicated at a failover (the async tail), replicated late; or put the quarantined ones back in their topics (--republish)",
		Args:  cobra.ExactArgs(1), RunE: func(_ *cobra.Command, a []string) error {
			if !republish {
				if orphanTopic != "" {
					return fmt.Errorf("--topic goes with --republish")
				}
				return call("GET", "/admin/v2/meridian/failover/"+a[0]+"/orphans", nil)
			}
			path := "/admin/v2/meridian/failover/" + a[0] + "/orphans/republish"
			if orphanTopic != "" {
				t := orphanTopic
				if !strings.Contains(t, "/") {
					t = "persistent://" + a[0] + "/" + t
				}
				path += "?topic=" + neturl.QueryEscape(t)
			}
			return call("POST", path, nil)
		}}
	orphans.Flags().BoolVar(&republish, "republish", false, "append every quarantined orphan to its topic once, with a new message id in the current epoch and its origin id in the property meridian-origin-id (a second run appends nothing); run it against a broker of the active region")
	orphans.Flags().StringVar(&orphanTopic, "topic", "", "with --republish: only this topic's orphans (a name in the namespace, or persistent://tenant/ns/topic)")
	failover.AddCommand(orphans)
	cmd.AddCommand(tenants, namespaces, topics, subs, regions, failover, newReplicationCmd(do))
	cmd.AddCommand(newAdminStorageCmds()...)
	cmd.AddCommand(newTokensCmd(), newTLSCmd(), newGossipKeysCmd(do))
	namespaces.AddCommand(newPermissionCmds(call)...)
	return cmd
}

// newReplicationCmd is `admin replication`: the replicators' state as a
// table (GET /admin/v2/meridian/replication), over the admin API of any
// broker (--url); that broker gathers the answers of its region's brokers.
func newReplicationCmd(do func(method, path string, body any) ([]byte, error)) *cobra.Command {
	repl := &cobra.Command{Use: "replication", Short: "Geo-replication: the state of each (topic, remote region) replicator"}
	var raw bool
	status := &cobra.Command{
		Use:   "status [NAMESPACE|TOPIC]",
		Short: "Show, for the region of --url, each replicator's connection, backlog, lag and errors as a table",
		Long: `status shows one row per (topic, remote region) replicator of the region
whose broker --url names: CONNECTED (the stream to the remote is open),
TARGET (the remote broker streamed to), BACKLOG and BYTES (local entries
the remote has not acknowledged), BEHIND (age of the oldest of them),
ACKED/LOCAL (the remote's acknowledged and the local sequence numbers),
INFLIGHT (batches sent, not acknowledged), QUOTA (over the replication
backlog quota), RESYNC (the remote needs a resync) and the last error.
A replicator runs only while its topic is loaded on its owner broker.

NAMESPACE is tenant/ns; TOPIC is persistent://tenant/ns/topic, tenant/ns/topic
or a bare topic name (in public/default); a partitioned topic's name
matches all its partitions.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(_ *cobra.Command, a []string) error {
			path := "/admin/v2/meridian/replication"
			if len(a) == 1 {
				path += "?filter=" + neturl.QueryEscape(replFilter(a[0]))
			}
			out, err := do("GET", path, nil)
			if err != nil {
				return err
			}
			if raw {
				os.Stdout.Write(out)
				if len(out) > 0 && out[len(out)-1] != '\n' {
					fmt.Println()
				}
				return nil
			}
			var rows []replRow
			if err := json.Unmarshal(out, &rows); err != nil {
				return fmt.Errorf("replication status: %w", err)
			}
			printReplTable(os.Stdout, rows)
			return nil
		},
	}
	status.Flags().BoolVar(&raw, "json", false, "print the raw JSON answer")
	repl.AddCommand(status, newVerifyCmd(do), newRPOCmd(do))
	return repl
}

// newRPOCmd is `admin replication rpo TENANT/NS`: per topic and remote
// region the RPO at risk and the RPO budget's state
// (GET /admin/v2/meridian/replication/rpo/TENANT/NS).
func newRPOCmd(do func(method, path string, body any) ([]byte, error)) *cobra.Command {
	var raw bool
	c := &cobra.Command{
		Use:   "rpo TENANT/NS",
		Short: "Show, for the region of --url, the RPO at risk per topic and remote region and the RPO budget's state",
		Long: `rpo shows one row per (topic, remote region) of the namespace in the region
whose broker --url names: AT RISK (the age of the oldest local entry the
remote has not acknowledged — what losing this region now would lose),
ENTRIES and BYTES (those entries), the namespace's BUDGET
(--max-replication-lag, --max-replication-lag-bytes) and ACTION, the
remote's STATE under it (under, exceeded, suspended: declared failed, not
counted) and the topic's GATE (open, hold, refuse), with CLOSED (seconds
the gate was closed since the topic loaded).`,
		Args: cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, a []string) error {
			if strings.Count(a[0], "/") != 1 {
				return fmt.Errorf("rpo %q: want TENANT/NS", a[0])
			}
			out, err := do("GET", "/admin/v2/meridian/replication/rpo/"+a[0], nil)
			if err != nil {
				return err
			}
			if raw {
				os.Stdout.Write(out)
				if len(out) > 0 && out[len(out)-1] != '\n' {
					fmt.Println()
				}
				return nil
			}
			var rows []rpoRow
			if err := json.Unmarshal(out, &rows); err != nil {
				return fmt.Errorf("replication rpo: %w", err)
			}
			printRPOTable(os.Stdout, rows)
			return nil
		},
	}
	c.Flags().BoolVar(&raw, "json", false, "print the raw JSON answer")
	return c
}

// rpoRow is one topic of the RPO read (the broker's replication.RPOTopic).
type rpoRow struct {
	Topic         string  `json:"topic"`
	MaxLagMs      int64   `json:"maxReplicationLagMs"`
	MaxLagBytes   int64   `json:"maxReplicationLagBytes"`
	Action        string  `json:"action"`
	Gate          string  `json:"gate"`
	ClosedSeconds float64 `json:"closedSeconds"`
	Remotes       []struct {
		Remote        string  `json:"remote"`
		State         string  `json:"state"`
		AtRiskSeconds float64 `json:"atRiskSeconds"`
		AtRiskEntries int64   `json:"atRiskEntries"`
		AtRiskBytes   int64   `json:"atRiskBytes"`
	} `json:"remotes"`
}

func printRPOTable(w io.Writer, rows []rpoRow) {
	if len(rows) == 0 {
		fmt.Fprintln(w, "no replicating topics loaded (a replicator runs only while its topic is loaded on its owner broker)")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TOPIC\tREMOTE\tAT RISK\tENTRIES\tBYTES\tBUDGET\tACTION\tSTATE\tGATE\tCLOSED")
	dash := func(s string) string {
		if s == "" {
			return "-"
		}
		return s
	}
	for _, r := range rows {
		var budget []string
		if r.MaxLagMs > 0 {
			budget = append(budget, (time.Duration(r.MaxLagMs) * time.Millisecond).String())
		}
		if r.MaxLagBytes > 0 {
			budget = append(budget, fmt.Sprintf("%dB", r.MaxLagBytes))
		}
		for _, rm := range r.Remotes {
			fmt.Fprintf(tw, "%s\t%s\t%.1fs\t%d\t%d\t%s\t%s\t%s\t%s\t%.1fs\n", r.Topic, rm.Remote, rm.AtRiskSeconds, rm.AtRiskEntries, rm.AtRiskBytes,
				dash(strings.Join(budget, ",")), dash(r.Action), dash(rm.State), r.Gate, r.ClosedSeconds)
		}
	}
	tw.Flush()
}

// replFilter turns a NAMESPACE or TOPIC argument into the broker's filter:
// tenant/ns, or a full persistent:// topic name.
func replFilter(s string) string {
	if strings.Contains(s, "://") {
		return s
	}
	switch parts := strings.Split(s, "/"); len(parts) {
	case 1:
		return "persistent://public/default/" + s
	case 3:
		return "persistent://" + s
	}
	return s
}

// replRow is one replicator's status (the broker's replStatus).
type replRow struct {
	Topic           string  `json:"topic"`
	Remote          string  `json:"remote"`
	Connected       bool    `json:"connected"`
	Target          string  `json:"target"`
	BacklogEntries  int64   `json:"backlogEntries"`
	BacklogBytes    int64   `json:"backlogBytes"`
	SecondsBehind   float64 `json:"secondsBehind"`
	AckedSeq        uint64  `json:"ackedSeq"`
	LocalSeq        uint64  `json:"localSeq"`
	InflightBatches int     `json:"inflightBatches"`
	OverQuota       bool    `json:"overQuota"`
	NeedsResync     string  `json:"needsResync"`
	LastError       string  `json:"lastError"`
}

func printReplTable(w io.Writer, rows []replRow) {
	if len(rows) == 0 {
		fmt.Fprintln(w, "no replicators (a replicator runs only while its topic is loaded on its owner broker, and only for namespaces of several regions)")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TOPIC\tREMOTE\tCONNECTED\tTARGET\tBACKLOG\tBYTES\tBEHIND\tACKED\tLOCAL\tINFLIGHT\tQUOTA\tRESYNC\tLAST ERROR")
	dash := func(s string) string {
		if s == "" {
			return "-"
		}
		return s
	}
	yes := func(b bool, y, n string) string {
		if b {
			return y
		}
		return n
	}
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%.1fs\t%d\t%d\t%d\t%s\t%s\t%s\n",
			r.Topic, r.Remote, yes(r.Connected, "yes", "no"), dash(r.Target), r.BacklogEntries, r.BacklogBytes,
			r.SecondsBehind, r.AckedSeq, r.LocalSeq, r.InflightBatches, yes(r.OverQuota, "OVER", "ok"),
			dash(r.NeedsResync), dash(strings.ReplaceAll(r.LastError, "\n", " ")))
	}
	tw.Flush()
}

// replFlags are the replication flags of `namespaces create|update`.
type replFlags struct {
	regions           string
	mode              string
	failover          string
	primary           string
	syncOnUnreachable string
	syncTimeout       time.Duration
	minRegions        int
	startAt           string
	backlogQuota      string
	rate              string
	failoverDelay     time.Duration
	switchBackDelay   time.Duration
	orphans           string
	maxLag            time.Duration
	maxLagBytes       string
	maxLagAction      string
}

func (f *replFlags) register(c *cobra.Command) {
	fl := c.Flags()
	fl.StringVar(&f.regions, "regions", "", "comma-separated regions the namespace replicates to, e.g. east,west (default on create: the broker's region)")
	fl.StringVar(&f.mode, "replication", "", "replication mode: async | sync | stretched (default async)")
	fl.StringVar(&f.failover, "failover", "", "active-standby | active-active (default active-standby)")
	fl.StringVar(&f.primary, "primary", "", "the active region of an active-standby namespace (default: the first region)")
	fl.StringVar(&f.syncOnUnreachable, "sync-on-unreachable", "", "sync/stretched while a region is unreachable: strict (sends fail after --sync-timeout) | degrade (fall back to async, alert) (default strict)")
	fl.DurationVar(&f.syncTimeout, "sync-timeout", 0, "how long a sync send waits for an unreachable region before failing, e.g. 30s (default 30s)")
	fl.IntVar(&f.minRegions, "min-regions", 0, "regions (the local one included) an entry must be persisted in before its receipt, sync/stretched (0 = all)")
	fl.StringVar(&f.startAt, "start-at", "", "where a newly added region's replication starts: earliest | latest (default earliest)")
	fl.StringVar(&f.rate, "replication-rate", "", "replication rate limit of the namespace to each remote region, bytes per second or with a unit (50MiB); 0 = none")
	fl.StringVar(&f.backlogQuota, "replication-backlog-quota", "", "bound on each remote region's replication backlog, in bytes or with a unit (10GiB, 500MB); 0 = none")
	fl.DurationVar(&f.failoverDelay, "failover-delay", 0, "active-standby: how long the active region must be seen down before another takes over (default 2s)")
	fl.DurationVar(&f.switchBackDelay, "switch-back-delay", 0, "active-standby: how long a more preferred region that returned must be up and caught up before the namespace moves back (default 30s; 0 = never on its own)")
	fl.DurationVar(&f.maxLag, "max-replication-lag", 0, "async: the RPO budget — past this age of the oldest entry a remote region (not declared failed) has not acknowledged, the topic's producers are held or refused (--max-replication-lag-action) until it is back under, e.g. 2s; 0 = none")
	fl.StringVar(&f.maxLagBytes, "max-replication-lag-bytes", "", "async: the RPO budget in bytes of local entries a remote region has not acknowledged, or with a unit (64MiB); 0 = none")
	fl.StringVar(&f.maxLagAction, "max-replication-lag-action", "", "past the RPO budget: hold (sends wait, as producer_request_hold) | refuse (producers refused with ProducerBlockedQuotaExceededException, as producer_exception) (default hold)")
	fl.StringVar(&f.orphans, "orphans", "", "active-standby: the async tail of a failover, when the old region returns: replicate | quarantine (default replicate; listed either way)")
}

// replUpdate holds the flags given on the command line (nil = not given).
type replUpdate struct {
	Regions *[]string
	fields  map[string]any
}

// policy returns the ReplicationPolicy fields given, by JSON name.
func (u replUpdate) policy() map[string]any {
	out := map[string]any{}
	for k, v := range u.fields {
		out[k] = v
	}
	return out
}

// update collects the flags the user gave (cmd.Flags().Changed).
func (f *replFlags) update(c *cobra.Command) (replUpdate, error) {
	u := replUpdate{fields: map[string]any{}}
	changed := c.Flags().Changed
	if changed("regions") {
		r := splitList(f.regions)
		if len(r) == 0 {
			return u, fmt.Errorf("--regions: give at least one region")
		}
		u.Regions = &r
	}
	str := func(flag, field, val string) {
		if changed(flag) {
			u.fields[field] = val
		}
	}
	str("replication", "mode", f.mode)
	str("failover", "failover", f.failover)
	str("primary", "primary", f.primary)
	str("sync-on-unreachable", "syncOnUnreachable", f.syncOnUnreachable)
	str("start-at", "startAt", f.startAt)
	str("orphans", "orphans", f.orphans)
	str("max-replication-lag-action", "maxReplicationLagAction", f.maxLagAction)
	if changed("max-replication-lag") {
		if f.maxLag < 0 || f.maxLag > 0 && f.maxLag < time.Millisecond {
			return u, fmt.Errorf("--max-replication-lag %s: 0 (none) or at least 1ms", f.maxLag)
		}
		u.fields["maxReplicationLagMs"] = f.maxLag.Milliseconds()
	}
	if changed("max-replication-lag-bytes") {
		n, err := parseByteSize(f.maxLagBytes)
		if err != nil {
			return u, fmt.Errorf("--max-replication-lag-bytes: %w", err)
		}
		u.fields["maxReplicationLagBytes"] = n
	}
	if changed("failover-delay") {
		if f.failoverDelay < time.Millisecond {
			return u, fmt.Errorf("--failover-delay %s: at least 1ms", f.failoverDelay)
		}
		u.fields["failoverDelayMs"] = f.failoverDelay.Milliseconds()
	}
	if changed("switch-back-delay") {
		if f.switchBackDelay < 0 {
			return u, fmt.Errorf("--switch-back-delay %s: must not be negative (0 = never)", f.switchBackDelay)
		}
		u.fields["switchBackDelayMs"] = f.switchBackDelay.Milliseconds()
	}
	if changed("sync-timeout") {
		if f.syncTimeout < 0 {
			return u, fmt.Errorf("--sync-timeout %s: must not be negative", f.syncTimeout)
		}
		if f.syncTimeout > 0 && f.syncTimeout < time.Millisecond {
			return u, fmt.Errorf("--sync-timeout %s: at least 1ms", f.syncTimeout)
		}
		u.fields["syncTimeoutMs"] = f.syncTimeout.Milliseconds()
	}
	if changed("min-regions") {
		u.fields["minRegions"] = f.minRegions
	}
	if changed("replication-rate") {
		n, err := parseByteSize(f.rate)
		if err != nil {
			return u, fmt.Errorf("--replication-rate: %w", err)
		}
		u.fields["rateBytesPerSecond"] = n
	}
	if changed("replication-backlog-quota") {
		n, err := parseByteSize(f.backlogQuota)
		if err != nil {
			return u, fmt.Errorf("--replication-backlog-quota: %w", err)
		}
		u.fields["backlogQuotaBytes"] = n
	}
	return u, nil
}

// parseByteSize parses "1073741824", "10GiB", "500MB", "64k": binary units
// (KiB, MiB, GiB, TiB; K, M, G, T alone are binary too) and decimal ones
// (KB, MB, GB, TB), case-insensitive, an optional B.
func parseByteSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	i := 0
	for i < len(t) && (t[i] >= '0' && t[i] <= '9' || t[i] == '.') {
		i++
	}
	num, unit := t[:i], strings.ToLower(strings.TrimSpace(t[i:]))
	if num == "" {
		return 0, fmt.Errorf("size %q: want bytes or a number with a unit such as 10GiB", s)
	}
	mult := map[string]float64{
		"": 1, "b": 1,
		"k": 1 << 10, "kib": 1 << 10, "ki": 1 << 10, "kb": 1e3,
		"m": 1 << 20, "mib": 1 << 20, "mi": 1 << 20, "mb": 1e6,
		"g": 1 << 30, "gib": 1 << 30, "gi": 1 << 30, "gb": 1e9,
		"t": 1 << 40, "tib": 1 << 40, "ti": 1 << 40, "tb": 1e12,
	}[unit]
	if mult == 0 {
		return 0, fmt.Errorf("size %q: unknown unit %q (B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)", s, t[i:])
	}
	if unit == "" || unit == "b" {
		n, err := strconv.ParseInt(num, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("size %q: %w", s, err)
		}
		return n, nil
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil {
		return 0, fmt.Errorf("size %q: %w", s, err)
	}
	v := f * mult
	if v >= 1<<63 {
		return 0, fmt.Errorf("size %q: too large", s)
	}
	return int64(v), nil
}

// runAsync POSTs body to path asking for 202 and polls the operation's
// status URL until it ends; it prints the result, and an operation that
// failed is an error.
func runAsync(do func(method, path string, body any) ([]byte, error), prefer *bool, path string, body any) error {
	*prefer = true
	out, err := do("POST", path, body)
	*prefer = false
	if err != nil {
		return err
	}
	var op struct {
		State     string          `json:"state"`
		StatusURL string          `json:"statusUrl"`
		Result    json.RawMessage `json:"result"`
		Error     string          `json:"error"`
	}
	for {
		if err := json.Unmarshal(out, &op); err != nil {
			return fmt.Errorf("the operation's state: %w: %s", err, out)
		}
		if op.State != "running" || op.StatusURL == "" {
			break
		}
		time.Sleep(200 * time.Millisecond)
		if out, err = do("GET", op.StatusURL, nil); err != nil {
			return err
		}
	}
	if len(op.Result) > 0 {
		var v any
		if json.Unmarshal(op.Result, &v) == nil {
			pretty, _ := json.MarshalIndent(v, "", "  ")
			fmt.Fprintln(os.Stdout, string(pretty))
		}
	}
	if op.State == "failed" {
		// (after its result, when it has one: a region-wide
		// switchover's says what moved and what did not)
		return errors.New(op.Error)
	}
	return nil
}
