// Package security is the broker's security room: TLS on the Pulsar
// listener, the admin API and the replication links (security.go), who a
// connection or an admin request is — token or client-certificate
// authentication, and the refresh of expiring tokens (auth.go) — and what
// a role may do: Pulsar's super-user, tenant-admin and namespace-grant
// model (authz.go); and the audit trail with its per-IP limit on
// authentication failures (audit.go).
//
// It imports broker/meta (names, tenants, namespaces' permissions, the
// shared errors) and the low-level libraries tlsutil and authtoken, never
// the broker's root or another room. It declares what it reads of the
// global store (Metadata); the broker passes its meta.Metadata.
//
// Contract with its callers:
//  1. Build one Guard with New at start; it is immutable and safe for
//     concurrent use. Its zero Config turns everything off: plaintext,
//     every client the anonymous role "", every operation allowed.
//  2. A Pulsar connection keeps a ConnAuth. On CONNECT call Authenticate;
//     on an error answer ERROR AuthenticationError with it and close the
//     connection, reading nothing more from it. When it reports expiring
//     credentials, call RefreshStep every RefreshCheck and do what it
//     says (send AUTH_CHALLENGE, or close); pass AUTH_RESPONSE to
//     AuthResponse and close the connection on an error.
//  3. Before acting on a request, call AuthorizeTopic or
//     AuthorizeNamespace with the connection's role (an admin request:
//     AuthorizeAdmin with its route pattern) and refuse on an error: it
//     wraps meta.ErrAuthorization or meta.ErrAuthentication, and says the
//     same whether or not what was asked for exists.
//  4. Refusals are counted (meridian_broker_auth_failures_total,
//     ..._authorization_denied_total). Authentication failures and admin
//     changes (AuditAdmin, which the admin API calls once a request that
//     is not a read is answered) go to the audit trail (audit.go,
//     Config.Audit) — failures per occurrence up to the per-IP limit,
//     then one line per throttled window; tokens are never logged.
package security
