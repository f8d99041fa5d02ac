package replication

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"time"

	"github.com/meridian-mq/meridian/broker/meta"
)

// Backlog markers: a topic whose replicators are behind is marked in the
// region's store, so the broker that owns it loads it again after a
// restart and replication resumes without clients.

const backlogMarkersKey = "/replication/backlog/"

// markerIdle: how long a replicator must be caught up before its backlog
// marker is cleared.
const markerIdle = 30 * time.Second

func backlogMarker(topic string) string { return backlogMarkersKey + url.PathEscape(topic) }

// loadBacklogged loads, on the broker that owns them (or becomes their
// owner now), the topics whose replicators still have a backlog but that
// no client or stream has loaded: after a restart, replication resumes by
// itself. Called from the policy loop.
func (svc *Service) loadBacklogged(ctx context.Context) {
	kvs, _, err := svc.cfg.Store.List(ctx, backlogMarkersKey)
	if err != nil {
		return
	}
	for _, kv := range kvs {
		name, err := url.PathUnescape(strings.TrimPrefix(kv.Key, backlogMarkersKey))
		if err != nil {
			continue
		}
		if svc.host.Loaded(name) {
			continue
		}
		serves, err := svc.host.Serves(ctx, name)
		if err != nil {
			svc.log.Warn("replication backlog: lookup failed", "topic", name, "err", err)
			continue
		}
		if !serves {
			continue
		}
		if err := svc.host.Topic(ctx, name); errors.Is(err, meta.ErrTopicNotFound) {
			_ = svc.cfg.Store.Delete(ctx, kv.Key)
		} else if err != nil {
			svc.log.Warn("replication backlog: topic not loaded", "topic", name, "err", err)
		} else {
			svc.log.Warn("loaded a topic to resume its replication", "topic", name)
		}
	}
}
