package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/meridian-mq/meridian/broker/meta"
)

// Namespaces in Pulsar's shapes: policies with their bundles, bundle
// unload and split, the namespace unload, and the namespace-wide cursor
// operations (clear backlog, unsubscribe) over the topics loaded here.

// bundlesData is Pulsar's BundlesData: the boundaries as "0x%08x".
type bundlesData struct {
	Boundaries []string `json:"boundaries"`
	NumBundles int      `json:"numBundles"`
}

func newBundlesData(bs []uint32) bundlesData {
	d := bundlesData{Boundaries: make([]string, len(bs)), NumBundles: len(bs) - 1}
	for i, b := range bs {
		d.Boundaries[i] = fmt.Sprintf("0x%08x", b)
	}
	return d
}

// readNamespacePolicies reads the body of PUT .../namespaces/T/NS:
// Meridian's policies, with Pulsar's "bundles" object read as the bundle
// count (pulsaradmin's CreateNsWithNumBundles sends {"bundles":
// {"numBundles": 8}}). Boundaries must be the even split of the hash
// range, the only initial split Meridian makes.
func readNamespacePolicies(r *http.Request) (meta.Policies, error) {
	var body struct {
		meta.Policies
		PulsarBundles *bundlesData `json:"bundles"`
	}
	if err := readJSON(r, &body, true); err != nil {
		return meta.Policies{}, err
	}
	p := body.Policies
	if b := body.PulsarBundles; b != nil {
		n := b.NumBundles
		if len(b.Boundaries) > 0 {
			if n != 0 && n != len(b.Boundaries)-1 {
				return p, meta.BadRequest(fmt.Errorf("bundles: numBundles %d with %d boundaries", n, len(b.Boundaries)))
			}
			n = len(b.Boundaries) - 1
			if n < 1 || n > 4096 {
				return p, meta.BadRequest(fmt.Errorf("bundles: %d boundaries", len(b.Boundaries)))
			}
			want := newBundlesData(meta.EvenBoundaries(n))
			for i, s := range b.Boundaries {
				if !strings.EqualFold(s, want.Boundaries[i]) {
					return p, meta.BadRequest(fmt.Errorf("bundles: boundaries %v: Meridian splits a new namespace evenly (%v); split bundles afterwards", b.Boundaries, want.Boundaries))
				}
			}
		}
		if n != 0 {
			p.Bundles = n
		}
	}
	return p, nil
}

// policiesAnswer is GET .../namespaces/T/NS: the stored policies, with
// the namespace's current bundles in Pulsar's "bundles".
func (s *Server) policiesAnswer(ctx context.Context, ns string) (any, error) {
	p, err := s.cfg.Meta.GetPolicies(ctx, ns)
	if err != nil {
		return nil, err
	}
	bs := meta.EvenBoundaries(p.Bundles)
	if s.cfg.Broker != nil {
		if cur, err := s.cfg.Broker.Bundles(ctx, ns); err == nil {
			bs = cur
		}
	}
	return struct {
		meta.Policies
		PulsarBundles bundlesData `json:"bundles"`
	}{p, newBundlesData(bs)}, nil
}

// readPartitions reads a partition count: a bare number (Pulsar's REST
// body, `meridian admin`) or Pulsar's partitioned-topic metadata
// {"partitions": N, "properties": {...}} (pulsaradmin sends that, as
// application/vnd.partitioned-topic-metadata+json).
func readPartitions(r *http.Request) (int, error) {
	body, err := readBody(r)
	if err != nil {
		return 0, err
	}
	t := strings.TrimSpace(string(body))
	if t == "" {
		return 0, meta.BadRequest(errors.New("empty body: want the number of partitions"))
	}
	if strings.HasPrefix(t, "{") {
		var md struct {
			Partitions *int              `json:"partitions"`
			Properties map[string]string `json:"properties"`
		}
		if err := json.Unmarshal(body, &md); err != nil {
			return 0, meta.BadRequest(err)
		}
		if md.Partitions == nil {
			return 0, meta.BadRequest(errors.New(`partitioned topic metadata without "partitions"`))
		}
		if len(md.Properties) > 0 {
			return 0, noTopicProperties()
		}
		return *md.Partitions, nil
	}
	var n int
	return n, meta.BadRequest(json.Unmarshal(body, &n))
}

// parseBundle parses a bundle name "0xLOWER_0xUPPER" and checks that it
// is one of the namespace's bundles.
func (s *Server) parseBundle(ctx context.Context, ns, name string) (Bundle, error) {
	lo, hi, ok := strings.Cut(name, "_")
	l, err1 := strconv.ParseUint(strings.TrimPrefix(strings.ToLower(lo), "0x"), 16, 32)
	u, err2 := strconv.ParseUint(strings.TrimPrefix(strings.ToLower(hi), "0x"), 16, 32)
	if !ok || err1 != nil || err2 != nil || l >= u {
		return Bundle{}, meta.BadRequest(fmt.Errorf("bundle %q: want 0xLOWER_0xUPPER, as listed by GET .../bundles", name))
	}
	bd := Bundle{Lower: uint32(l), Upper: uint32(u)}
	bs, err := s.cfg.Broker.Bundles(ctx, ns)
	if err != nil {
		return Bundle{}, err
	}
	for i := 0; i+1 < len(bs); i++ {
		if bs[i] == bd.Lower && bs[i+1] == bd.Upper {
			return bd, nil
		}
	}
	return Bundle{}, fmt.Errorf("%w: bundle %s of namespace %s (its bundles: %v)", meta.ErrNotFound, name, ns, newBundlesData(bs).Boundaries)
}

func (s *Server) namespaceHandlers(h func(string, func(*http.Request) (any, error)), ns func(*http.Request) string) {
	exists := func(r *http.Request) error {
		_, err := s.cfg.Meta.GetPolicies(r.Context(), ns(r))
		return err
	}
	h("GET /admin/v2/namespaces/{tenant}/{ns}/bundles", func(r *http.Request) (any, error) {
		if err := exists(r); err != nil {
			return nil, err
		}
		bs, err := s.cfg.Broker.Bundles(r.Context(), ns(r))
		if err != nil {
			return nil, err
		}
		return newBundlesData(bs), nil
	})
	h("PUT /admin/v2/namespaces/{tenant}/{ns}/unload", func(r *http.Request) (any, error) {
		if err := exists(r); err != nil {
			return nil, err
		}
		return nil, s.cfg.Broker.UnloadNamespace(r.Context(), ns(r))
	})
	// The bundle operations: PUT .../{bundle}/unload, PUT .../{bundle}/split
	// (?unload=true gives the halves up), POST .../{bundle}/clearBacklog
	// [/{sub}], POST .../{bundle}/unsubscribe/{sub}.
	bundleOp := func(r *http.Request) (Bundle, error) {
		if err := exists(r); err != nil {
			return Bundle{}, err
		}
		return s.parseBundle(r.Context(), ns(r), r.PathValue("bundle"))
	}
	h("PUT /admin/v2/namespaces/{tenant}/{ns}/{bundle}/{op}", func(r *http.Request) (any, error) {
		op := r.PathValue("op")
		if op != "unload" && op != "split" {
			return nil, noSuchCall(r)
		}
		bd, err := bundleOp(r)
		if err != nil {
			return nil, err
		}
		if op == "unload" {
			return nil, s.cfg.Broker.UnloadBundle(r.Context(), ns(r), bd)
		}
		if alg := r.URL.Query().Get("splitAlgorithmName"); alg != "" && alg != "range_equally_divide" {
			return nil, unsupported("bundle split algorithm %q: Meridian splits a bundle at the middle of its range (range_equally_divide)", alg)
		}
		return nil, s.cfg.Broker.SplitBundle(r.Context(), ns(r), bd, r.URL.Query().Get("unload") == "true")
	})
	// Namespace-wide cursor operations act on the namespace's topics
	// loaded on this broker (a topic nobody uses is not loaded for it),
	// as Pulsar's act on the topics of the bundles a broker owns.
	each := func(r *http.Request, bd *Bundle, f func(Topic) error) error {
		if err := exists(r); err != nil {
			return err
		}
		var errs []error
		for _, t := range s.cfg.Broker.LoadedTopics(ns(r)) {
			if bd != nil {
				tb, err := s.cfg.Broker.BundleOf(r.Context(), t.Name())
				if err != nil || tb != *bd {
					continue
				}
			}
			if err := f(t); err != nil && !errors.Is(err, meta.ErrNotFound) {
				errs = append(errs, err)
			}
		}
		return errors.Join(errs...)
	}
	clear := func(r *http.Request, sub string) func(Topic) error {
		return func(t Topic) error {
			for _, name := range t.SubscriptionNames() {
				if sub == "" || name == sub {
					if err := t.Skip(r.Context(), name, -1); err != nil {
						return err
					}
				}
			}
			return nil
		}
	}
	unsubscribe := func(r *http.Request) func(Topic) error {
		return func(t Topic) error { return t.DeleteSubscription(r.Context(), r.PathValue("sub"), false) }
	}
	h("POST /admin/v2/namespaces/{tenant}/{ns}/clearBacklog", func(r *http.Request) (any, error) {
		return nil, each(r, nil, clear(r, ""))
	})
	h("POST /admin/v2/namespaces/{tenant}/{ns}/clearBacklog/{sub}", func(r *http.Request) (any, error) {
		return nil, each(r, nil, clear(r, r.PathValue("sub")))
	})
	h("POST /admin/v2/namespaces/{tenant}/{ns}/unsubscribe/{sub}", func(r *http.Request) (any, error) {
		return nil, each(r, nil, unsubscribe(r))
	})
	// One pattern for POST .../{bundle}/clearBacklog: a pattern with the
	// literal would overlap .../clearBacklog/{sub} and
	// .../permissions/{role} without either being more specific.
	h("POST /admin/v2/namespaces/{tenant}/{ns}/{bundle}/{op}", func(r *http.Request) (any, error) {
		if r.PathValue("op") != "clearBacklog" {
			return nil, noSuchCall(r)
		}
		bd, err := bundleOp(r)
		if err != nil {
			return nil, err
		}
		return nil, each(r, &bd, clear(r, ""))
	})
	h("POST /admin/v2/namespaces/{tenant}/{ns}/{bundle}/clearBacklog/{sub}", func(r *http.Request) (any, error) {
		bd, err := bundleOp(r)
		if err != nil {
			return nil, err
		}
		return nil, each(r, &bd, clear(r, r.PathValue("sub")))
	})
	h("POST /admin/v2/namespaces/{tenant}/{ns}/{bundle}/unsubscribe/{sub}", func(r *http.Request) (any, error) {
		bd, err := bundleOp(r)
		if err != nil {
			return nil, err
		}
		return nil, each(r, &bd, unsubscribe(r))
	})
}
