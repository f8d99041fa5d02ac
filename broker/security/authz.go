package security

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/meridian-mq/meridian/broker/meta"
	"github.com/meridian-mq/meridian/internal/authtoken"
)

// Authorization (SecurityConfig.Authorization), Pulsar's model:
//
//   - a super-user role (SecurityConfig.SuperUserRoles, and the region
//     roles of Meridian's own processes) may do everything;
//   - a tenant's admin roles (TenantInfo.AdminRoles) may do everything
//     within the tenant: manage its namespaces, topics, permissions, and
//     produce and consume;
//   - any other role may only what a namespace grants it in its policies'
//     auth_policies.namespace_auth (Pulsar's JSON): "produce" (producers,
//     schema creation), "consume" (subscriptions); either one lets it look
//     the namespace's topics up and list them. Permissions live with the
//     namespace's policies in the global store, so every region enforces
//     the same ones.
//
// A role that may not act on a namespace gets the same answer whether the
// namespace (or its tenant, or the topic) exists or not: ERROR /
// response code AuthorizationError on the protocol, HTTP 403 on the admin
// API, with a message built only from the role, the operation and the
// name it asked for. Only a role that may act there learns, from the
// ordinary errors, what does not exist.

// Op is an operation a role is authorized for.
type Op string

const (
	OpLookup  Op = "lookup"  // lookup, partition metadata, topic lists, schemas, stats: produce or consume
	OpProduce Op = "produce" // producers, schema creation
	OpConsume Op = "consume" // subscriptions and their admin calls
	OpAdmin   Op = "administer"
	OpSuper   Op = "administer the cluster"
)

// AuthzOn reports whether authorization is on.
func (g *Guard) AuthzOn() bool { return g.cfg.Authorization }

// notAuthorized is the one refusal of role for op on name.
func (g *Guard) notAuthorized(role string, op Op, name string) error {
	g.sec.denied.WithLabelValues(string(op)).Inc()
	if name == "" {
		return fmt.Errorf("%w: role %q may not %s", meta.ErrAuthorization, role, op)
	}
	return fmt.Errorf("%w: role %q may not %s %s", meta.ErrAuthorization, role, op, name)
}

// isTenantAdmin reports whether role administers tenant (false for a
// tenant that does not exist).
func (g *Guard) isTenantAdmin(ctx context.Context, role, tenant string) (bool, error) {
	ti, err := g.meta.GetTenant(ctx, tenant)
	switch {
	case errors.Is(err, meta.ErrNotFound):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("%w: reading tenant %s: %v", meta.ErrServiceNotReady, tenant, err)
	}
	return slices.Contains(ti.AdminRoles, role), nil
}

// allowed reports whether role may op on namespace ns (topic, if not "",
// names one of its topics by its local name).
func (g *Guard) allowed(ctx context.Context, role string, op Op, ns, topic string) (bool, error) {
	if g.isSuperUser(role) {
		return true, nil
	}
	if op == OpSuper {
		return false, nil
	}
	tenant, _, _ := strings.Cut(ns, "/")
	if ok, err := g.isTenantAdmin(ctx, role, tenant); err != nil || ok {
		return ok, err
	}
	if op == OpAdmin || ns == tenant {
		return false, nil
	}
	pol, err := g.meta.GetPolicies(ctx, ns)
	switch {
	case errors.Is(err, meta.ErrNotFound):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("%w: reading namespace %s: %v", meta.ErrServiceNotReady, ns, err)
	}
	ap, err := meta.DecodeAuthPolicies(pol)
	if err != nil {
		return false, err
	}
	grants := ap.NamespaceAuth[role]
	if topic != "" {
		grants = append(slices.Clone(grants), ap.DestinationAuth["persistent://"+ns+"/"+topic][role]...)
	}
	switch op {
	case OpProduce:
		return slices.Contains(grants, meta.ActionProduce), nil
	case OpConsume:
		return slices.Contains(grants, meta.ActionConsume), nil
	case OpLookup:
		return slices.Contains(grants, meta.ActionProduce) || slices.Contains(grants, meta.ActionConsume), nil
	}
	return false, nil
}

// AuthorizeTopic checks that role (a connection's) may op on topic (as
// the client named it). nil when authorization is off.
func (g *Guard) AuthorizeTopic(ctx context.Context, role, topic string, op Op) error {
	if !g.AuthzOn() {
		return nil
	}
	tn, err := meta.ParseTopic(topic)
	if err != nil {
		return err
	}
	ok, err := g.allowed(ctx, role, op, tn.NamespaceName(), tn.PartitionedParent().Local)
	if err != nil {
		return err
	}
	if !ok {
		return g.notAuthorized(role, op, topic)
	}
	return nil
}

// AuthorizeNamespace checks that role (a connection's) may op on ns.
func (g *Guard) AuthorizeNamespace(ctx context.Context, role, ns string, op Op) error {
	if !g.AuthzOn() {
		return nil
	}
	ok, err := g.allowed(ctx, role, op, ns, "")
	if err != nil {
		return err
	}
	if !ok {
		return g.notAuthorized(role, op, ns)
	}
	return nil
}

// ---- admin API ------------------------------------------------------

// adminRule is what an admin route needs: an operation on the
// namespace (or tenant) named by its path.
type adminRule struct {
	op    Op
	scope string // "cluster", "tenant", "namespace"
}

// adminRuleFor maps a route ("METHOD /path") to its rule. Routes not
// named here need a super-user.
func adminRuleFor(pattern string) adminRule {
	method, path, _ := strings.Cut(pattern, " ")
	read := method == http.MethodGet
	switch {
	case path == "/admin/v2/clusters":
		return adminRule{op: "", scope: "cluster"} // any authenticated role: region names only
	case strings.HasPrefix(path, "/admin/v2/tenants/{tenant}"):
		if read {
			return adminRule{op: OpAdmin, scope: "tenant"}
		}
		return adminRule{op: OpSuper, scope: "cluster"}
	case path == "/admin/v2/namespaces/{tenant}":
		return adminRule{op: OpAdmin, scope: "tenant"}
	case strings.HasPrefix(path, "/admin/v2/meridian/failover/{tenant}/{ns}"):
		if read {
			return adminRule{op: OpAdmin, scope: "namespace"}
		}
		return adminRule{op: OpSuper, scope: "cluster"}
	case path == "/admin/v2/namespaces/{tenant}/{ns}/topics",
		path == "/admin/v2/persistent/{tenant}/{ns}",
		path == "/admin/v2/persistent/{tenant}/{ns}/partitioned",
		// The (empty) non-persistent lists pulsaradmin's Topics().List
		// reads too, and the HTTP lookup (pulsaradmin's Lookup, a client
		// given an http:// service URL): as a lookup over the protocol.
		path == "/admin/v2/non-persistent/{tenant}/{ns}",
		path == "/admin/v2/non-persistent/{tenant}/{ns}/partitioned",
		strings.HasPrefix(path, "/lookup/v2/topic/persistent/{tenant}/{ns}/{topic}"):
		return adminRule{op: OpLookup, scope: "namespace"}
	case strings.HasPrefix(path, "/admin/v2/namespaces/{tenant}/{ns}"):
		return adminRule{op: OpAdmin, scope: "namespace"}
	case strings.HasPrefix(path, "/admin/v2/persistent/{tenant}/{ns}/{topic}/subscription/"):
		return adminRule{op: OpConsume, scope: "namespace"}
	case strings.HasPrefix(path, "/admin/v2/persistent/{tenant}/{ns}/{topic}"),
		strings.HasPrefix(path, "/admin/v2/non-persistent/{tenant}/{ns}/{topic}"),
		strings.HasPrefix(path, "/admin/v2/schemas/{tenant}/{ns}/{topic}"):
		if read {
			return adminRule{op: OpLookup, scope: "namespace"}
		}
		return adminRule{op: OpAdmin, scope: "namespace"}
	}
	return adminRule{op: OpSuper, scope: "cluster"}
}

// adminRole authenticates an admin request: "Authorization: Bearer
// TOKEN", or a client certificate from the CA over https.
func (g *Guard) adminRole(r *http.Request) (string, error) {
	if err := g.throttle(r.RemoteAddr); err != nil {
		return "", err
	}
	if h := r.Header.Get("Authorization"); h != "" {
		tok, ok := strings.CutPrefix(h, "Bearer ")
		if !ok {
			err := fmt.Errorf("%w: %w: Authorization must be \"Bearer TOKEN\"", meta.ErrAuthentication, errAuthMethod)
			g.authFailed("admin", r.RemoteAddr, err)
			return "", err
		}
		cl, err := g.cfg.Tokens.Verify(tok, time.Now())
		if err != nil {
			g.authFailed("admin", r.RemoteAddr, err)
			return "", fmt.Errorf("%w: %v", meta.ErrAuthentication, err)
		}
		if err := tokenRole(cl); err != nil {
			g.authFailed("admin", r.RemoteAddr, err)
			return "", err
		}
		return cl.Role, nil
	}
	role, err := g.certRole(r.TLS)
	if err == nil {
		return role, nil
	}
	if errors.Is(err, meta.ErrServiceNotReady) {
		return "", err // the registry could not be read: 503, not a failure of the caller
	}
	if !errors.Is(err, errNoCertificate) {
		g.authFailed("admin", r.RemoteAddr, err)
		return "", err
	}
	err = fmt.Errorf("%w: %w: send \"Authorization: Bearer TOKEN\"", meta.ErrAuthentication, authtoken.ErrNoToken)
	g.authFailed("admin", r.RemoteAddr, err)
	return "", err
}

// AuthorizeAdmin checks an admin request against its route's rule
// (pattern: "METHOD /path" as registered).
// role is who the request authenticated as ("" with authentication off
// or when it failed), for the audit trail (AuditAdmin).
func (g *Guard) AuthorizeAdmin(r *http.Request, pattern string) (role string, err error) {
	if !g.AuthnOn() {
		return "", nil
	}
	if pattern == MetricsPattern {
		return g.authorizeMetrics(r)
	}
	role, err = g.adminRole(r)
	if err != nil || !g.AuthzOn() {
		return role, err
	}
	rule := adminRuleFor(pattern)
	if rule.op == "" {
		return role, nil
	}
	ns, name := r.PathValue("tenant"), r.PathValue("tenant")
	if rule.scope == "namespace" {
		ns = r.PathValue("tenant") + "/" + r.PathValue("ns")
		name = ns
		if t := r.PathValue("topic"); t != "" {
			name = "persistent://" + ns + "/" + t
		}
	}
	if rule.scope == "cluster" {
		ns, name = "", ""
	}
	topic := ""
	if tn, err := meta.ParseTopic(name); err == nil && r.PathValue("topic") != "" {
		topic = tn.PartitionedParent().Local
	}
	ok, err := g.allowed(r.Context(), role, rule.op, ns, topic)
	if err != nil {
		return role, err
	}
	if !ok {
		return role, g.notAuthorized(role, rule.op, name)
	}
	return role, nil
}

// MetricsPattern is the admin API's route of the Prometheus metrics.
const MetricsPattern = "GET /metrics"

// authorizeMetrics is Pulsar's authenticateMetricsEndpoint
// (Config.AuthenticateMetricsEndpoint): off, a scrape needs nothing; on,
// a valid token or client certificate, and with authorization on a
// super-user or a role of Config.MetricsRoles.
func (g *Guard) authorizeMetrics(r *http.Request) (string, error) {
	if !g.cfg.AuthenticateMetricsEndpoint {
		return "", nil
	}
	role, err := g.adminRole(r)
	if err != nil || !g.AuthzOn() {
		return role, err
	}
	if g.isSuperUser(role) || slices.Contains(g.cfg.MetricsRoles, role) {
		return role, nil
	}
	return role, g.notAuthorized(role, "read the metrics", "")
}

// errSecretNeedsAuth: a secret (the gossip keyring) is asked for where no
// caller is authenticated.
var errSecretNeedsAuth = errors.New("serving the gossip keyring needs an authenticated caller: a super-user's token (token authentication on), or a client certificate from the deployment's CA (TLS on)")

// AuthorizeSecret checks an admin request for a secret (the gossip
// keyring, which lets its holder join or read the deployment's gossip):
// with token authentication on, only a super-user, whether authorization
// is on or not; with it off, only a caller presenting a client certificate
// from the deployment's CA over https; never an anonymous one.
func (g *Guard) AuthorizeSecret(r *http.Request) error {
	if g.AuthnOn() {
		role, err := g.adminRole(r)
		if err != nil {
			return err
		}
		if !g.isSuperUser(role) {
			return g.notAuthorized(role, "manage the gossip keyring", "")
		}
		return nil
	}
	if g.TLSOn() {
		// Any certificate of the deployment's CA (a broker's or a
		// bookie's too): authentication is off.
		if cs := r.TLS; cs != nil && len(cs.VerifiedChains) > 0 && len(cs.PeerCertificates) > 0 {
			return nil
		}
	}
	return meta.StatusError{Status: http.StatusForbidden, Err: errSecretNeedsAuth}
}
