package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// meridian admin: a CLI over the admin HTTP API (Pulsar's /admin/v2 paths).
func newAdminCmd() *cobra.Command {
	var url string
	cmd := &cobra.Command{Use: "admin", Short: "Administer tenants, namespaces, topics and subscriptions over the admin API"}
	cmd.PersistentFlags().StringVar(&url, "url", "http://127.0.0.1:8080", "admin API URL of any broker")
	call := func(method, path string, body any) error {
		var rd io.Reader
		if body != nil {
			b, err := json.Marshal(body)
			if err != nil {
				return err
			}
			rd = bytes.NewReader(b)
		}
		req, err := http.NewRequest(method, strings.TrimRight(url, "/")+path, rd)
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := (&http.Client{Timeout: 60 * time.Second}).Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		if resp.StatusCode >= 300 {
			var e struct{ Reason string }
			if json.Unmarshal(out, &e) == nil && e.Reason != "" {
				return fmt.Errorf("%s (HTTP %d)", e.Reason, resp.StatusCode)
			}
			return fmt.Errorf("HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(out)))
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
	sub(tenants, "create TENANT", "Create a tenant", 1, func(a []string) error {
		return call("PUT", "/admin/v2/tenants/"+a[0], map[string]any{"adminRoles": []string{}, "allowedClusters": []string{}})
	})
	sub(tenants, "delete TENANT", "Delete a tenant without namespaces", 1, func(a []string) error { return call("DELETE", "/admin/v2/tenants/"+a[0], nil) })

	namespaces := &cobra.Command{Use: "namespaces", Short: "Namespaces and their policies"}
	sub(namespaces, "list TENANT", "List a tenant's namespaces", 1, func(a []string) error { return call("GET", "/admin/v2/namespaces/"+a[0], nil) })
	sub(namespaces, "create TENANT/NS", "Create a namespace", 1, func(a []string) error { return call("PUT", "/admin/v2/namespaces/"+a[0], map[string]any{}) })
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
	cmd.AddCommand(tenants, namespaces, topics, subs)
	cmd.AddCommand(newAdminStorageCmds()...)
	return cmd
}
