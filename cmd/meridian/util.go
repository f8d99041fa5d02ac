package main

import (
	"strings"
	"time"
)

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// dedupTimeout maps the --dedup-producer-inactivity-timeout flag to
// broker.Config.DedupProducerInactivityTimeout: 0 the default, any
// negative value never.
func dedupTimeout(d time.Duration) time.Duration {
	if d < 0 {
		return -1
	}
	return d
}
