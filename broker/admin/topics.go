package admin

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/meridian-mq/meridian/broker/meta"
)

// Topic operations beyond create, delete and stats: the managed ledger's
// records and partitioned stats.

// rawAnswer is an answer that is not JSON (writeAdmin lets it write
// itself).
type rawAnswer interface{ writeHTTP(w http.ResponseWriter) }

// textAnswer is a plain string body (Pulsar answers a health check so).
type textAnswer string

func (t textAnswer) writeHTTP(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/plain")
	w.Write([]byte(t))
}

func (s *Server) topicHandlers(h func(string, func(*http.Request) (any, error)), ns func(*http.Request) string, topic func(*http.Request) (meta.TopicName, error)) {
	// Meridian has no non-persistent topics: their lists are empty.
	for _, path := range []string{"/admin/v2/non-persistent/{tenant}/{ns}", "/admin/v2/non-persistent/{tenant}/{ns}/partitioned"} {
		h("GET "+path, func(r *http.Request) (any, error) {
			if _, err := s.cfg.Meta.GetPolicies(r.Context(), ns(r)); err != nil {
				return nil, err
			}
			return []string{}, nil
		})
	}
	h("GET /admin/v2/persistent/{tenant}/{ns}/{topic}/internal-info", func(r *http.Request) (any, error) {
		t, err := s.topic(r, topic)
		if err != nil {
			return nil, err
		}
		return t.InternalInfo(), nil
	})
	h("GET /admin/v2/persistent/{tenant}/{ns}/{topic}/partitioned-stats", func(r *http.Request) (any, error) {
		tn, err := topic(r)
		if err != nil {
			return nil, err
		}
		n, err := s.cfg.Meta.Partitions(r.Context(), tn)
		if err != nil {
			return nil, err
		}
		if n == 0 {
			return nil, fmt.Errorf("%w: Partitioned Topic %s not found", meta.ErrNotFound, tn)
		}
		per := r.URL.Query().Get("perPartition") != "false"
		ps := PartitionedTopicStats{Publishers: []PublisherStats{}, Subscriptions: map[string]SubscriptionStats{},
			Replication: map[string]any{}, Partitions: map[string]TopicStats{}}
		ps.Metadata.Partitions = n
		for i := 0; i < n; i++ {
			name := tn.PartitionName(i).String()
			t, err := s.cfg.Broker.Topic(r.Context(), name, false)
			if errors.Is(err, meta.ErrTopicNotFound) {
				continue // registered by its creation, never written: no stats
			}
			if err != nil {
				return nil, fmt.Errorf("partition %s: %w", name, err)
			}
			ps.add(name, t.Stats(), per)
		}
		return ps, nil
	})
}
