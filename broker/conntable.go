package broker

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// connTable holds a broker's open client connections and the counts its
// connection limits are checked against: per client IP
// (Config.MaxConnectionsPerIP) and not yet CONNECTED
// (Config.MaxUnauthenticatedConnections).
type connTable struct {
	perIPLimit, unauthLimit int              // withDefaults values (underLimit)
	open                    prometheus.Gauge // the connections gauge

	mu     sync.Mutex
	closed bool
	conns  map[*conn]struct{}
	perIP  map[string]int // open connections by client IP (conn.ip)
	unauth int            // open connections not yet CONNECTED (conn.unauth)
}

func newConnTable(perIPLimit, unauthLimit int, open prometheus.Gauge) *connTable {
	return &connTable{perIPLimit: perIPLimit, unauthLimit: unauthLimit, open: open,
		conns: map[*conn]struct{}{}, perIP: map[string]int{}}
}

// admit adds c, not yet CONNECTED. It returns the limit that refused it
// (limitConnectionsPerIP, limitUnauthConnections) or "", and closed when the
// table no longer admits anyone (the broker is closing).
func (t *connTable) admit(c *conn) (refused string, closed bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case t.closed:
		return "", true
	case !underLimit(t.perIP[c.ip], t.perIPLimit):
		return limitConnectionsPerIP, false
	case !underLimit(t.unauth, t.unauthLimit):
		return limitUnauthConnections, false
	}
	t.conns[c] = struct{}{}
	t.perIP[c.ip]++
	t.unauth++
	c.unauth = true
	t.open.Inc()
	return "", false
}

// remove takes c out (once; later calls do nothing).
func (t *connTable) remove(c *conn) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.conns[c]; !ok {
		return
	}
	delete(t.conns, c)
	if t.perIP[c.ip]--; t.perIP[c.ip] <= 0 {
		delete(t.perIP, c.ip)
	}
	t.authenticatedLocked(c)
	t.open.Dec()
}

// authenticated moves c out of the connections not yet CONNECTED.
func (t *connTable) authenticated(c *conn) {
	t.mu.Lock()
	t.authenticatedLocked(c)
	t.mu.Unlock()
}

func (t *connTable) authenticatedLocked(c *conn) {
	if c.unauth {
		c.unauth = false
		t.unauth--
	}
}

// close stops admitting and returns the connections open now.
func (t *connTable) close() []*conn {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.closed = true
	out := make([]*conn, 0, len(t.conns))
	for c := range t.conns {
		out = append(out, c)
	}
	return out
}
