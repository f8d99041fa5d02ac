package admin

import (
	"fmt"
	"net/http"
	"strconv"

	"github.com/meridian-mq/meridian/broker/meta"
)

// Cursor operations on a subscription, in Pulsar's paths: reset to a
// message id, skip, skip all (clear backlog), expire, expire on every
// subscription, peek.

func (s *Server) cursorHandlers(h func(string, func(*http.Request) (any, error)), ns func(*http.Request) string, topic func(*http.Request) (meta.TopicName, error)) {
	const sub = "/admin/v2/persistent/{tenant}/{ns}/{topic}/subscription/{sub}"
	count := func(r *http.Request, name string) (int64, error) {
		n, err := strconv.ParseInt(r.PathValue(name), 10, 64)
		if err != nil || n < 0 {
			return 0, meta.BadRequest(fmt.Errorf("%s %q: want a number >= 0", name, r.PathValue(name)))
		}
		return n, nil
	}
	h("POST "+sub+"/resetcursor", func(r *http.Request) (any, error) {
		var id MessageID
		if err := readJSON(r, &id, false); err != nil {
			return nil, err
		}
		t, err := s.topic(r, topic)
		if err != nil {
			return nil, err
		}
		return nil, t.ResetCursorTo(r.Context(), r.PathValue("sub"), id)
	})
	h("POST "+sub+"/skip/{numMessages}", func(r *http.Request) (any, error) {
		n, err := count(r, "numMessages")
		if err != nil {
			return nil, err
		}
		t, err := s.topic(r, topic)
		if err != nil {
			return nil, err
		}
		return nil, t.Skip(r.Context(), r.PathValue("sub"), n)
	})
	h("POST "+sub+"/skip_all", func(r *http.Request) (any, error) {
		t, err := s.topic(r, topic)
		if err != nil {
			return nil, err
		}
		return nil, t.Skip(r.Context(), r.PathValue("sub"), -1)
	})
	h("POST "+sub+"/expireMessages/{expireTimeInSeconds}", func(r *http.Request) (any, error) {
		secs, err := count(r, "expireTimeInSeconds")
		if err != nil {
			return nil, err
		}
		t, err := s.topic(r, topic)
		if err != nil {
			return nil, err
		}
		return nil, t.Expire(r.Context(), r.PathValue("sub"), secs)
	})
	h("POST /admin/v2/persistent/{tenant}/{ns}/{topic}/all_subscription/expireMessages/{expireTimeInSeconds}", func(r *http.Request) (any, error) {
		secs, err := count(r, "expireTimeInSeconds")
		if err != nil {
			return nil, err
		}
		t, err := s.topic(r, topic)
		if err != nil {
			return nil, err
		}
		return nil, t.Expire(r.Context(), "", secs)
	})
	h("GET "+sub+"/position/{messagePosition}", func(r *http.Request) (any, error) {
		n, err := count(r, "messagePosition")
		if err != nil || n < 1 {
			return nil, meta.BadRequest(fmt.Errorf("messagePosition %q: want a number >= 1", r.PathValue("messagePosition")))
		}
		t, err := s.topic(r, topic)
		if err != nil {
			return nil, err
		}
		m, err := t.Peek(r.Context(), r.PathValue("sub"), int(n))
		if err != nil {
			return nil, err
		}
		return messageAnswer(m), nil
	})
}
