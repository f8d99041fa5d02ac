package security

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/meridian-mq/meridian/broker/meta"
	"github.com/meridian-mq/meridian/internal/authtoken"
)

// The audit trail (issue 30, item 8): who changed what through the admin
// API, who was refused it, and who failed to authenticate — when, and
// from where — as structured lines on Config.Audit, one per event:
//
//	event=admin_change role=… method=PUT path=/admin/v2/… route="PUT /admin/v2/…" status=204 remote=IP:PORT
//	event=admin_denied (the same fields; status 401 or 403, and err)
//	event=auth_failure where=pulsar|admin remote=… reason=missing|expired|invalid|method|… err=…
//	event=auth_throttled ip=… failures=N until=… (once per throttled window)
//
// Reads (GET, HEAD) are not audited. Tokens are never logged.
//
// Failures are also limited per client IP: after AuthFailureLimit
// failures within AuthFailureWindow, every authentication attempt from
// that IP — also one with valid credentials, so a guess that happens to
// be right gains nothing — is refused without being checked until the
// window ends (the admin API answers 429, the Pulsar listener ERROR
// AuthenticationError saying so). Refusals while throttled count as
// meridian_broker_auth_failures_total{reason="throttled"} and are not
// logged one by one.

// Default per-IP authentication failure limit.
const (
	DefaultAuthFailureLimit  = 100
	DefaultAuthFailureWindow = time.Minute
	// maxFailureIPs bounds the IPs the limiter remembers; when full, the
	// windows that ended are forgotten, and if none has, all are (a
	// flood from that many addresses is then limited per window again
	// rather than growing memory).
	maxFailureIPs = 65536
)

// errThrottled: too many authentication failures from the client's IP.
var errThrottled = errors.New("too many authentication failures from this address")

// failureLimiter counts authentication failures per IP in fixed windows.
// Pure: time is an argument.
type failureLimiter struct {
	limit  int // <= 0: no limit
	window time.Duration

	mu  sync.Mutex
	ips map[string]*failWindow
}

type failWindow struct {
	start     time.Time
	failures  int
	throttled int // refusals while over the limit
}

// blocked reports whether ip is over the limit at now, and until when;
// it counts the refusal.
func (l *failureLimiter) blocked(ip string, now time.Time) (bool, time.Time) {
	if l.limit <= 0 {
		return false, time.Time{}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	w := l.ips[ip]
	if w == nil || now.Sub(w.start) >= l.window {
		return false, time.Time{}
	}
	if w.failures < l.limit {
		return false, time.Time{}
	}
	w.throttled++
	return true, w.start.Add(l.window)
}

// failed records one failure of ip at now; crossed reports the failure
// that reached the limit (the caller logs that once).
func (l *failureLimiter) failed(ip string, now time.Time) (crossed bool, until time.Time) {
	if l.limit <= 0 {
		return false, time.Time{}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ips == nil {
		l.ips = map[string]*failWindow{}
	}
	w := l.ips[ip]
	if w == nil || now.Sub(w.start) >= l.window {
		if w == nil && len(l.ips) >= maxFailureIPs {
			for k, o := range l.ips {
				if now.Sub(o.start) >= l.window {
					delete(l.ips, k)
				}
			}
			if len(l.ips) >= maxFailureIPs {
				clear(l.ips)
			}
		}
		w = &failWindow{start: now}
		l.ips[ip] = w
	}
	w.failures++
	return w.failures == l.limit, w.start.Add(l.window)
}

// hostOf is the IP of a remote address ("IP:PORT"), or the address.
func hostOf(addr string) string {
	if h, _, err := net.SplitHostPort(addr); err == nil {
		return h
	}
	return addr
}

func remoteOf(nc net.Conn) string {
	if nc == nil || nc.RemoteAddr() == nil {
		return ""
	}
	return nc.RemoteAddr().String()
}

// audit is the audit logger.
func (g *Guard) audit() *slog.Logger { return g.cfg.Audit }

// throttle refuses an authentication attempt from remote while its IP is
// over the failure limit.
func (g *Guard) throttle(remote string) error {
	if ok, until := g.limiter.blocked(hostOf(remote), time.Now()); ok {
		g.sec.authFailures.WithLabelValues("throttled").Inc()
		return meta.StatusError{Status: http.StatusTooManyRequests, Err: fmt.Errorf("%w: %w (%s); retry after %s",
			meta.ErrAuthentication, errThrottled, hostOf(remote), until.UTC().Format(time.RFC3339))}
	}
	return nil
}

// authFailed counts, audits and limits one refused authentication from
// remote, on where ("pulsar" or "admin").
func (g *Guard) authFailed(where, remote string, err error) {
	reason := failureReason(err)
	g.sec.authFailures.WithLabelValues(reason).Inc()
	g.audit().Info("authentication failed", "event", "auth_failure", "where", where, "remote", remote, "reason", reason, "err", err)
	if crossed, until := g.limiter.failed(hostOf(remote), time.Now()); crossed {
		g.audit().Warn("authentication throttled: too many failures from one address", "event", "auth_throttled",
			"ip", hostOf(remote), "failures", g.limiter.limit, "window", g.limiter.window, "until", until.UTC().Format(time.RFC3339))
	}
}

func failureReason(err error) string {
	switch {
	case errors.Is(err, errThrottled):
		return "throttled"
	case errors.Is(err, authtoken.ErrNoToken):
		return "missing"
	case errors.Is(err, authtoken.ErrExpired):
		return "expired"
	case errors.Is(err, errAuthMethod):
		return "method"
	case errors.Is(err, errReservedRole), errors.Is(err, errRegionNotBroker), errors.Is(err, errRegionUnknown):
		return "reserved-role"
	}
	return "invalid"
}

// AuditAdmin records an admin request that changes something (not GET or
// HEAD) once it was answered: role is who (as authenticated; "" with
// authentication off or when it failed), status the HTTP status, err the
// refusal or failure if any.
func (g *Guard) AuditAdmin(r *http.Request, role, route string, status int, err error) {
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		return
	}
	event := "admin_change"
	if errors.Is(err, meta.ErrAuthentication) || errors.Is(err, meta.ErrAuthorization) {
		event = "admin_denied"
	}
	attrs := []any{"event", event, "role", role, "method", r.Method, "path", r.URL.Path, "route", route, "status", status, "remote", r.RemoteAddr}
	if err != nil {
		attrs = append(attrs, "err", err)
	}
	g.audit().Info("admin request", attrs...)
}
