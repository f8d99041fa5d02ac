package cluster

import (
	"context"
	"strings"
	"sync"
	"time"
)

// Cache is a copy in memory of the keys under a prefix, kept current by a
// watch: it lists the prefix, then watches from the list's revision, and
// lists again when the watch ends (a compaction, a member that lost its
// leader). Get answers only while the copy is current — it heard from etcd
// (an event, or the progress notification it asks for every
// ProgressInterval) within StaleAfter — so a caller falls back to a read of
// the store otherwise: a watch on a member that stopped answering (paused,
// cut off, down) does not end, it only goes quiet. An answer may lag a
// write by the watch's delivery (a few milliseconds): a cache is for hints
// that whoever acts on them checks again (a lookup's answer, for one).
// Safe for concurrent use.
type Cache struct {
	s      *Store
	prefix string

	mu    sync.RWMutex
	kvs   map[string]KV
	live  bool      // listed and watching
	heard time.Time // the watch's last answer

	cancel context.CancelFunc
	done   chan struct{}
}

// WatchPrefix starts a cache of the keys under prefix (relative to the
// store's own prefix). It is not live until its first list has answered;
// Close stops it.
func WatchPrefix(s *Store, prefix string) *Cache {
	ctx, cancel := context.WithCancel(context.Background())
	c := &Cache{s: s, prefix: prefix, kvs: map[string]KV{}, cancel: cancel, done: make(chan struct{})}
	go c.run(ctx)
	return c
}

// Get returns the cached record of key. live is false while the copy is not
// current (starting, or re-listing after its watch ended): then found means
// nothing and the caller asks the store.
func (c *Cache) Get(key string) (kv KV, found, live bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if !c.current() {
		return KV{}, false, false
	}
	kv, found = c.kvs[key]
	return kv, found, true
}

// Live reports whether the copy is current.
func (c *Cache) Live() bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.current()
}

// Cache liveness: a progress notification is asked for every
// ProgressInterval; the copy stops answering StaleAfter after etcd's last
// answer.
const (
	ProgressInterval = time.Second
	StaleAfter       = 3 * time.Second
)

func (c *Cache) current() bool { return c.live && time.Since(c.heard) < StaleAfter }

// Close stops the watch.
func (c *Cache) Close() {
	c.cancel()
	<-c.done
}

func (c *Cache) setLive(v bool) {
	c.mu.Lock()
	c.live = v
	c.mu.Unlock()
}

func (c *Cache) run(ctx context.Context) {
	defer close(c.done)
	for pause := 100 * time.Millisecond; ctx.Err() == nil; {
		kvs, rev, err := c.s.List(ctx, c.prefix)
		if err != nil {
			select {
			case <-ctx.Done():
			case <-time.After(pause):
			}
			pause = min(2*pause, 2*time.Second)
			continue
		}
		pause = 100 * time.Millisecond
		m := make(map[string]KV, len(kvs))
		for _, kv := range kvs {
			m[kv.Key] = kv
		}
		// The watch starts before the copy goes live: none of its events
		// is missed.
		wctx, stop := context.WithCancel(ctx)
		wch := c.s.WatchProgress(wctx, c.prefix, rev+1)
		c.mu.Lock()
		c.kvs, c.live, c.heard = m, true, time.Now()
		c.mu.Unlock()
		go c.askProgress(wctx)
		for evs := range wch {
			c.mu.Lock()
			c.heard = time.Now()
			for _, ev := range evs {
				if !strings.HasPrefix(ev.KV.Key, c.prefix) {
					continue
				}
				if ev.Deleted {
					delete(c.kvs, ev.KV.Key)
				} else {
					c.kvs[ev.KV.Key] = ev.KV
				}
			}
			c.mu.Unlock()
		}
		stop()
		c.setLive(false)
	}
}

// askProgress asks etcd for a progress notification every
// ProgressInterval while the watch runs.
func (c *Cache) askProgress(ctx context.Context) {
	t := time.NewTicker(ProgressInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		_ = c.s.RequestProgress(ctx)
	}
}
