package broker

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

// operations a role is authorized for.
type authOp string

const (
	opLookup  authOp = "lookup"  // lookup, partition metadata, topic lists, schemas, stats: produce or consume
	opProduce authOp = "produce" // producers, schema creation
	opConsume authOp = "consume" // subscriptions and their admin calls
	opAdmin   authOp = "administer"
	opSuper   authOp = "administer the cluster"
)

func (b *Broker) authzOn() bool { return b.cfg.Security.Authorization }

// notAuthorized is the one refusal of role for op on name.
func (b *Broker) notAuthorized(role string, op authOp, name string) error {
	b.sec.denied.WithLabelValues(string(op)).Inc()
	if name == "" {
		return fmt.Errorf("%w: role %q may not %s", meta.ErrAuthorization, role, op)
	}
	return fmt.Errorf("%w: role %q may not %s %s", meta.ErrAuthorization, role, op, name)
}

// isTenantAdmin reports whether role administers tenant (false for a
// tenant that does not exist).
func (b *Broker) isTenantAdmin(ctx context.Context, role, tenant string) (bool, error) {
	ti, err := b.meta.GetTenant(ctx, tenant)
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
func (b *Broker) allowed(ctx context.Context, role string, op authOp, ns, topic string) (bool, error) {
	if b.isSuperUser(role) {
		return true, nil
	}
	if op == opSuper {
		return false, nil
	}
	tenant, _, _ := strings.Cut(ns, "/")
	if ok, err := b.isTenantAdmin(ctx, role, tenant); err != nil || ok {
		return ok, err
	}
	if op == opAdmin || ns == tenant {
		return false, nil
	}
	pol, err := b.meta.GetPolicies(ctx, ns)
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
	case opProduce:
		return slices.Contains(grants, meta.ActionProduce), nil
	case opConsume:
		return slices.Contains(grants, meta.ActionConsume), nil
	case opLookup:
		return slices.Contains(grants, meta.ActionProduce) || slices.Contains(grants, meta.ActionConsume), nil
	}
	return false, nil
}

// authorizeTopic checks that the connection's role may op on topic (as
// the client named it). nil when authorization is off.
func (c *conn) authorizeTopic(ctx context.Context, topic string, op authOp) error {
	if !c.b.authzOn() {
		return nil
	}
	tn, err := meta.ParseTopic(topic)
	if err != nil {
		return err
	}
	role := c.role()
	ok, err := c.b.allowed(ctx, role, op, tn.NamespaceName(), tn.PartitionedParent().Local)
	if err != nil {
		return err
	}
	if !ok {
		return c.b.notAuthorized(role, op, topic)
	}
	return nil
}

// authorizeNamespace checks that the connection's role may op on ns.
func (c *conn) authorizeNamespace(ctx context.Context, ns string, op authOp) error {
	if !c.b.authzOn() {
		return nil
	}
	role := c.role()
	ok, err := c.b.allowed(ctx, role, op, ns, "")
	if err != nil {
		return err
	}
	if !ok {
		return c.b.notAuthorized(role, op, ns)
	}
	return nil
}

// ---- admin API ------------------------------------------------------

// adminRule is what an admin route needs: an operation on the
// namespace (or tenant) named by its path.
type adminRule struct {
	op    authOp
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
			return adminRule{op: opAdmin, scope: "tenant"}
		}
		return adminRule{op: opSuper, scope: "cluster"}
	case path == "/admin/v2/namespaces/{tenant}":
		return adminRule{op: opAdmin, scope: "tenant"}
	case strings.HasPrefix(path, "/admin/v2/meridian/failover/{tenant}/{ns}"):
		if read {
			return adminRule{op: opAdmin, scope: "namespace"}
		}
		return adminRule{op: opSuper, scope: "cluster"}
	case path == "/admin/v2/namespaces/{tenant}/{ns}/topics",
		path == "/admin/v2/persistent/{tenant}/{ns}",
		path == "/admin/v2/persistent/{tenant}/{ns}/partitioned":
		return adminRule{op: opLookup, scope: "namespace"}
	case strings.HasPrefix(path, "/admin/v2/namespaces/{tenant}/{ns}"):
		return adminRule{op: opAdmin, scope: "namespace"}
	case strings.HasPrefix(path, "/admin/v2/persistent/{tenant}/{ns}/{topic}/subscription/"):
		return adminRule{op: opConsume, scope: "namespace"}
	case strings.HasPrefix(path, "/admin/v2/persistent/{tenant}/{ns}/{topic}"),
		strings.HasPrefix(path, "/admin/v2/schemas/{tenant}/{ns}/{topic}"):
		if read {
			return adminRule{op: opLookup, scope: "namespace"}
		}
		return adminRule{op: opAdmin, scope: "namespace"}
	}
	return adminRule{op: opSuper, scope: "cluster"}
}

// adminRole authenticates an admin request: "Authorization: Bearer
// TOKEN", or a client certificate from the CA over https.
func (b *Broker) adminRole(r *http.Request) (string, error) {
	if h := r.Header.Get("Authorization"); h != "" {
		tok, ok := strings.CutPrefix(h, "Bearer ")
		if !ok {
			err := fmt.Errorf("%w: %w: Authorization must be \"Bearer TOKEN\"", meta.ErrAuthentication, errAuthMethod)
			b.authFailed(err)
			return "", err
		}
		cl, err := b.cfg.Security.Tokens.Verify(tok, time.Now())
		if err != nil {
			b.authFailed(err)
			return "", fmt.Errorf("%w: %v", meta.ErrAuthentication, err)
		}
		return cl.Role, nil
	}
	if role, ok := certRole(r.TLS); ok {
		return role, nil
	}
	err := fmt.Errorf("%w: %w: send \"Authorization: Bearer TOKEN\"", meta.ErrAuthentication, authtoken.ErrNoToken)
	b.authFailed(err)
	return "", err
}

// authorizeAdmin checks an admin request against its route's rule.
func (b *Broker) authorizeAdmin(r *http.Request, pattern string) error {
	if !b.authnOn() {
		return nil
	}
	role, err := b.adminRole(r)
	if err != nil || !b.authzOn() {
		return err
	}
	rule := adminRuleFor(pattern)
	if rule.op == "" {
		return nil
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
	ok, err := b.allowed(r.Context(), role, rule.op, ns, topic)
	if err != nil {
		return err
	}
	if !ok {
		return b.notAuthorized(role, rule.op, name)
	}
	return nil
}

// permissionHandlers serves Pulsar's namespace permission paths:
// GET .../permissions, POST and DELETE .../permissions/{role} (the body of
// POST is the list of actions, e.g. ["produce","consume"]).
func (b *Broker) permissionHandlers(h func(string, func(*http.Request) (any, error)), ns func(*http.Request) string) {
	h("GET /admin/v2/namespaces/{tenant}/{ns}/permissions", func(r *http.Request) (any, error) {
		p, err := b.meta.GetPolicies(r.Context(), ns(r))
		if err != nil {
			return nil, err
		}
		ap, err := meta.DecodeAuthPolicies(p)
		if err != nil {
			return nil, err
		}
		return ap.NamespaceAuth, nil
	})
	h("POST /admin/v2/namespaces/{tenant}/{ns}/permissions/{role}", func(r *http.Request) (any, error) {
		var actions []string
		if err := readJSON(r, &actions, false); err != nil {
			return nil, err
		}
		for _, a := range actions {
			if a != meta.ActionProduce && a != meta.ActionConsume {
				return nil, meta.BadRequest(fmt.Errorf("action %q: want produce or consume", a))
			}
		}
		role := r.PathValue("role")
		if role == "" {
			return nil, meta.BadRequest(errors.New("empty role"))
		}
		slices.Sort(actions)
		actions = slices.Compact(actions)
		return nil, b.meta.UpdateAuthPolicies(r.Context(), ns(r), func(ap *meta.AuthPolicies) {
			ap.NamespaceAuth[role] = actions
		})
	})
	h("DELETE /admin/v2/namespaces/{tenant}/{ns}/permissions/{role}", func(r *http.Request) (any, error) {
		return nil, b.meta.UpdateAuthPolicies(r.Context(), ns(r), func(ap *meta.AuthPolicies) {
			delete(ap.NamespaceAuth, r.PathValue("role"))
		})
	})
}
