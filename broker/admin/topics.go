package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/meridian-mq/meridian/broker/meta"
)

// Topic operations beyond create, delete and stats: lookup over HTTP,
// the last message id and the id at a time, unload, the managed ledger's
// records, partitioned stats, and a message by id.

// lookupData is Pulsar's LookupData.
type lookupData struct {
	BrokerURL    string `json:"brokerUrl"`
	BrokerURLTLS string `json:"brokerUrlTls"`
	HTTPURL      string `json:"httpUrl"`
	HTTPURLTLS   string `json:"httpUrlTls"`
}

// newLookupData is the answer of a lookup of bi in listener ("": the
// internal one): bi's ServiceURL (already in that listener), and the
// listener's web service URLs when bi names any for it, else its admin
// URL (Pulsar's NamespaceService answers a listener's brokerHttpUrl and
// brokerHttpsUrl).
func newLookupData(bi BrokerInfo, listener string) lookupData {
	var ld lookupData
	if strings.HasPrefix(bi.ServiceURL, "pulsar+ssl://") {
		ld.BrokerURLTLS = bi.ServiceURL
	} else {
		ld.BrokerURL = bi.ServiceURL
	}
	if h, ok := bi.HTTPListeners[listener]; ok && listener != "" {
		ld.HTTPURL, ld.HTTPURLTLS = h.HTTP, h.HTTPS
		return ld
	}
	if strings.HasPrefix(bi.AdminURL, "https://") {
		ld.HTTPURLTLS = bi.AdminURL
	} else {
		ld.HTTPURL = bi.AdminURL
	}
	return ld
}

// ListenerNameHeader is Pulsar's header naming the listener an HTTP
// lookup is answered in (its listenerName query parameter does the same).
const ListenerNameHeader = "X-Pulsar-ListenerName"

// httpLookupListener is the listener an HTTP lookup is answered in
// (self being this broker): Pulsar's listenerName query parameter, else
// its X-Pulsar-ListenerName header (what Pulsar's Java client and
// pulsar-admin send); else, for a client that sends neither, the
// listener of self whose host is the one the client reached this broker
// by (the request's Host) — pulsar-client-go v0.19.0 sends no listener
// name over HTTP whatever its ListenerName (its httpLookupService asks
// /lookup/v2/topic/... with no parameter or header of it), and a client
// that dialled the broker's external name is outside and is sent the
// owner's external address. A listener's host is its Pulsar URL's or its
// web service URLs' (an admin load balancer may have a name of its own).
// "" (the internal listener) when self has no listeners, or none or
// several of them have that host.
func httpLookupListener(r *http.Request, self BrokerInfo) string {
	if n := r.URL.Query().Get("listenerName"); n != "" {
		return n
	}
	if n := r.Header.Get(ListenerNameHeader); n != "" {
		return n
	}
	return listenerOfHost(self.Listeners, self.HTTPListeners, r.Host)
}

// listenerOfHost is the one listener of ls (and hl, their web service
// URLs) one of whose URLs' host is the host of hostport (a Host header:
// host or host:port), "" when none or several.
func listenerOfHost(ls map[string]string, hl meta.HTTPListeners, hostport string) string {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.Trim(host, "[]")
	hasHost := func(u string) bool {
		pu, err := url.Parse(u)
		return u != "" && err == nil && strings.EqualFold(pu.Hostname(), host)
	}
	found := ""
	for name, u := range ls {
		if !hasHost(u) && !hasHost(hl[name].HTTP) && !hasHost(hl[name].HTTPS) {
			continue
		}
		if found != "" {
			return ""
		}
		found = name
	}
	return found
}

// rawAnswer is an answer that is not JSON (writeAdmin lets it write
// itself).
type rawAnswer interface{ writeHTTP(w http.ResponseWriter) }

// textAnswer is a plain string body (Pulsar answers a bundle range so).
type textAnswer string

func (t textAnswer) writeHTTP(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/plain")
	w.Write([]byte(t))
}

// messageAnswer is a message as Pulsar's peek and get-message-by-id
// answer it: the payload as the body, the rest in X-Pulsar-* headers
// (what pulsaradmin's handleResp reads).
type messageAnswer Message

// pulsarDate is the time format of Pulsar's message headers.
const pulsarDate = "2006-01-02T15:04:05.000-0700"

func (m messageAnswer) writeHTTP(w http.ResponseWriter) {
	hd := w.Header()
	hd.Set("Content-Type", "application/octet-stream")
	hd.Set("X-Pulsar-Message-ID", fmt.Sprintf("%d:%d", m.ID.LedgerID, m.ID.EntryID))
	if m.PublishMs > 0 {
		hd.Set("X-Pulsar-Publish-Time", time.UnixMilli(m.PublishMs).UTC().Format(pulsarDate))
	}
	if m.BrokerPublishMs > 0 {
		hd.Set("X-Pulsar-Broker-Entry-Metadata-Timestamp", strconv.FormatInt(m.BrokerPublishMs, 10))
	}
	if m.EventTimeMs > 0 {
		hd.Set("X-Pulsar-Event-Time", time.UnixMilli(m.EventTimeMs).UTC().Format(pulsarDate))
	}
	if m.Key != "" {
		hd.Set("X-Pulsar-Partition-Key", m.Key)
	}
	if m.ProducerName != "" {
		hd.Set("X-Pulsar-Producer-Name", m.ProducerName)
	}
	hd.Set("X-Pulsar-Sequence-Id", strconv.FormatInt(m.SequenceID, 10))
	if m.BatchSize > 0 {
		hd.Set("X-Pulsar-Num-Batch-Message", strconv.Itoa(m.BatchSize))
		hd.Set("X-Pulsar-Batch-Size", strconv.Itoa(len(m.Payload)))
	}
	if len(m.Properties) > 0 {
		if b, err := json.Marshal(m.Properties); err == nil {
			hd.Set("X-Pulsar-Property", string(b))
		}
	}
	w.WriteHeader(http.StatusOK)
	w.Write(m.Payload)
}

func (s *Server) topicHandlers(h func(string, func(*http.Request) (any, error)), ns func(*http.Request) string, topic func(*http.Request) (meta.TopicName, error)) {
	// Non-persistent topics exist while loaded (broker/nonpersistent.go):
	// the list is this broker's loaded ones; none is partitioned.
	h("GET /admin/v2/non-persistent/{tenant}/{ns}", func(r *http.Request) (any, error) {
		if _, err := s.cfg.Meta.GetPolicies(r.Context(), ns(r)); err != nil {
			return nil, err
		}
		return s.cfg.Broker.NonPersistentTopics(ns(r)), nil
	})
	h("GET /admin/v2/non-persistent/{tenant}/{ns}/partitioned", func(r *http.Request) (any, error) {
		if _, err := s.cfg.Meta.GetPolicies(r.Context(), ns(r)); err != nil {
			return nil, err
		}
		names, err := s.cfg.Meta.ListNonPersistentPartitioned(r.Context(), ns(r))
		if names == nil {
			names = []string{}
		}
		return names, err
	})
	npTopic := func(r *http.Request) (meta.TopicName, error) {
		return meta.ParseTopic("non-persistent://" + r.PathValue("tenant") + "/" + r.PathValue("ns") + "/" + r.PathValue("topic"))
	}
	// A partitioned non-persistent topic is its partition count: its
	// partitions are non-persistent topics like any other.
	npPartitions := func(create bool) func(r *http.Request) (any, error) {
		return func(r *http.Request) (any, error) {
			tn, err := npTopic(r)
			if err != nil {
				return nil, err
			}
			n, err := readPartitions(r)
			if err != nil {
				return nil, err
			}
			if n > maxPartitions {
				return nil, meta.BadRequest(fmt.Errorf("partition count %d: at most %d", n, maxPartitions))
			}
			if _, err := s.cfg.Meta.GetPolicies(r.Context(), tn.NamespaceName()); err != nil {
				return nil, err
			}
			return nil, s.cfg.Meta.SetPartitions(r.Context(), tn, n, create)
		}
	}
	h("PUT /admin/v2/non-persistent/{tenant}/{ns}/{topic}/partitions", npPartitions(true))
	h("POST /admin/v2/non-persistent/{tenant}/{ns}/{topic}/partitions", npPartitions(false))
	h("GET /admin/v2/non-persistent/{tenant}/{ns}/{topic}/partitions", func(r *http.Request) (any, error) {
		tn, err := npTopic(r)
		if err != nil {
			return nil, err
		}
		n, err := s.cfg.Meta.Partitions(r.Context(), tn)
		return map[string]int{"partitions": n}, err
	})
	h("DELETE /admin/v2/non-persistent/{tenant}/{ns}/{topic}/partitions", func(r *http.Request) (any, error) {
		tn, err := npTopic(r)
		if err != nil {
			return nil, err
		}
		return nil, s.cfg.Meta.DeletePartitioned(r.Context(), tn)
	})
	h("GET /admin/v2/non-persistent/{tenant}/{ns}/{topic}/stats", func(r *http.Request) (any, error) {
		tn, err := meta.ParseTopic("non-persistent://" + r.PathValue("tenant") + "/" + r.PathValue("ns") + "/" + r.PathValue("topic"))
		if err != nil {
			return nil, err
		}
		return s.cfg.Broker.NonPersistentStats(r.Context(), tn)
	})
	h("GET /admin/v2/non-persistent/{tenant}/{ns}/{topic}/partitioned-stats", func(r *http.Request) (any, error) {
		tn, err := npTopic(r)
		if err != nil {
			return nil, err
		}
		ps := NonPersistentPartitionedTopicStats{Partitions: map[string]NonPersistentTopicStats{}}
		ps.Publishers = []NonPersistentPublisherStats{}
		ps.Subscriptions = map[string]NonPersistentSubscriptionStats{}
		ps.Replication = map[string]NonPersistentReplicatorStats{}
		ps.Metadata.Partitions, err = foldPartitions(s, r, tn, s.cfg.Broker.NonPersistentStats, ps.add)
		if err != nil {
			return nil, err
		}
		return ps, nil
	})
	lookup := func(r *http.Request) (meta.TopicName, error) {
		tn, err := topic(r)
		if err != nil {
			return tn, err
		}
		if _, err := s.cfg.Meta.GetPolicies(r.Context(), tn.NamespaceName()); err != nil {
			return tn, err
		}
		return tn, nil
	}
	h("GET /lookup/v2/topic/persistent/{tenant}/{ns}/{topic}", func(r *http.Request) (any, error) {
		tn, err := lookup(r)
		if err != nil {
			return nil, err
		}
		listener := httpLookupListener(r, s.cfg.Broker.Self())
		bi, err := s.cfg.Broker.Lookup(r.Context(), tn, listener)
		if err != nil {
			return nil, err
		}
		return newLookupData(bi, listener), nil
	})
	h("GET /lookup/v2/topic/persistent/{tenant}/{ns}/{topic}/bundle", func(r *http.Request) (any, error) {
		tn, err := lookup(r)
		if err != nil {
			return nil, err
		}
		bd, err := s.cfg.Broker.BundleOf(r.Context(), tn)
		if err != nil {
			return nil, err
		}
		return textAnswer(bd.String()), nil
	})
	h("GET /admin/v2/persistent/{tenant}/{ns}/{topic}/lastMessageId", func(r *http.Request) (any, error) {
		t, err := s.topic(r, topic)
		if err != nil {
			return nil, err
		}
		return t.LastMessageID(), nil
	})
	h("GET /admin/v2/persistent/{tenant}/{ns}/{topic}/messageid/{timestamp}", func(r *http.Request) (any, error) {
		ms, err := strconv.ParseInt(r.PathValue("timestamp"), 10, 64)
		if err != nil {
			return nil, meta.BadRequest(fmt.Errorf("timestamp %q: want milliseconds since the epoch", r.PathValue("timestamp")))
		}
		t, err := s.topic(r, topic)
		if err != nil {
			return nil, err
		}
		return t.MessageIDAt(r.Context(), ms)
	})
	h("PUT /admin/v2/persistent/{tenant}/{ns}/{topic}/unload", func(r *http.Request) (any, error) {
		tn, err := topic(r)
		if err != nil {
			return nil, err
		}
		if n, err := s.cfg.Meta.Partitions(r.Context(), tn); err != nil {
			return nil, err
		} else if n > 0 {
			// A partitioned topic unloads its partitions.
			var errs []error
			for i := 0; i < n; i++ {
				t, err := s.cfg.Broker.Topic(r.Context(), tn.PartitionName(i).String(), false)
				if err == nil {
					err = t.Unload(r.Context())
				}
				if err != nil && !errors.Is(err, meta.ErrTopicNotFound) {
					errs = append(errs, err)
				}
			}
			return nil, errors.Join(errs...)
		}
		t, err := s.cfg.Broker.Topic(r.Context(), tn.String(), false)
		if err != nil {
			return nil, err
		}
		return nil, t.Unload(r.Context())
	})
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
		ps := PartitionedTopicStats{Publishers: []PublisherStats{}, Subscriptions: map[string]SubscriptionStats{},
			Replication: map[string]ReplicatorStats{}, Partitions: map[string]TopicStats{}}
		ps.Metadata.Partitions, err = foldPartitions(s, r, tn, func(ctx context.Context, name meta.TopicName) (TopicStats, error) {
			t, err := s.cfg.Broker.Topic(ctx, name.String(), false)
			if err != nil {
				return TopicStats{}, err
			}
			return t.Stats(), nil
		}, ps.add)
		if err != nil {
			return nil, err
		}
		return ps, nil
	})
	h("GET /admin/v2/persistent/{tenant}/{ns}/{topic}/ledger/{ledger}/entry/{entry}", func(r *http.Request) (any, error) {
		l, err1 := strconv.ParseInt(r.PathValue("ledger"), 10, 64)
		e, err2 := strconv.ParseInt(r.PathValue("entry"), 10, 64)
		if err1 != nil || err2 != nil {
			return nil, meta.BadRequest(fmt.Errorf("message id %s:%s: want numbers", r.PathValue("ledger"), r.PathValue("entry")))
		}
		t, err := s.topic(r, topic)
		if err != nil {
			return nil, err
		}
		m, err := t.Message(r.Context(), MessageID{LedgerID: l, EntryID: e, PartitionIndex: t.Name().Partition})
		if err != nil {
			return nil, err
		}
		return messageAnswer(m), nil
	})
}

// foldPartitions folds the stats of each partition of the partitioned
// topic tn into add (perPartition, unless the request says false) and
// returns the number of partitions. A partition this broker serves is
// read with local; one another broker serves (meta.NotOwnerError), from
// its owner with the caller's credentials; one loaded nowhere
// (meta.ErrTopicNotFound here, or errPeerNotFound from its owner) adds
// nothing.
func foldPartitions[S any](s *Server, r *http.Request, tn meta.TopicName, local func(context.Context, meta.TopicName) (S, error), add func(name string, st S, perPartition bool)) (int, error) {
	n, err := s.cfg.Meta.Partitions(r.Context(), tn)
	if err != nil {
		return 0, err
	}
	if n == 0 {
		return 0, fmt.Errorf("%w: Partitioned Topic %s not found", meta.ErrNotFound, tn)
	}
	per := r.URL.Query().Get("perPartition") != "false"
	for i := 0; i < n; i++ {
		name := tn.PartitionName(i)
		st, err := local(r.Context(), name)
		if errors.Is(err, meta.ErrTopicNotFound) {
			continue // not loaded: registered, never written, or nobody produces or consumes it
		}
		var no meta.NotOwnerError
		if errors.As(err, &no) && no.OwnerAdminURL != "" && s.cfg.PeerHTTP != nil {
			path := "/admin/v2/" + name.Domain + "/" + strings.TrimPrefix(name.String(), name.Domain+"://") + "/stats"
			err = s.peerStats(r, no.OwnerAdminURL, path, &st)
			if errors.Is(err, errPeerNotFound) {
				continue
			}
			if err != nil {
				return 0, fmt.Errorf("partition %s, from its owner %s: %w", name, no.OwnerAdminURL, err)
			}
		} else if err != nil {
			return 0, fmt.Errorf("partition %s: %w", name, err)
		}
		add(name.String(), st, per)
	}
	return n, nil
}

// errPeerNotFound: the peer answered 404 (for a non-persistent topic: it
// is no longer loaded there).
var errPeerNotFound = errors.New("not found on the peer")

// peerStats reads the stats at path from another broker (authoritative,
// with the request's credentials) into out.
func (s *Server) peerStats(r *http.Request, ownerAdminURL, path string, out any) error {
	u := strings.TrimSuffix(ownerAdminURL, "/") + path + "?authoritative=true"
	req, err := http.NewRequestWithContext(r.Context(), http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	if a := r.Header.Get("Authorization"); a != "" {
		req.Header.Set("Authorization", a)
	}
	resp, err := s.cfg.PeerHTTP(10 * time.Second).Do(req)
	if err != nil {
		return fmt.Errorf("%w: %v", meta.ErrServiceNotReady, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxAdminBody))
	if err != nil {
		return fmt.Errorf("%w: %v", meta.ErrServiceNotReady, err)
	}
	if resp.StatusCode == http.StatusNotFound && strings.HasPrefix(path, "/admin/v2/non-persistent/") {
		return errPeerNotFound
	}
	if resp.StatusCode != http.StatusOK {
		return meta.StatusError{Status: resp.StatusCode, Err: fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(body)))}
	}
	if err := json.Unmarshal(body, out); err != nil {
		return fmt.Errorf("%w: stats at %s: %v", meta.ErrServiceNotReady, path, err)
	}
	return nil
}
