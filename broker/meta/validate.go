package meta

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Validation of a namespace's policies, as Pulsar validates them: what
// Pulsar refuses is refused with its status and its message (412 for a
// message TTL, 400 for retention and persistence, as Pulsar's
// AdminResource.checkArgument), and what Meridian could not apply is
// refused too, before it is stored: a value that is stored and then fails
// every topic load of the namespace (a retention of max int64 minutes
// overflows time.Duration) is refused here, never discovered there.

// MaxRetentionMinutes is the longest retention by time: the most minutes
// a time.Duration holds (about 292 years).
const MaxRetentionMinutes = math.MaxInt64 / int64(time.Minute)

// MaxRetentionSizeMB is the largest retention by size: the most MB whose
// byte count an int64 holds.
const MaxRetentionSizeMB = math.MaxInt64 >> 20

// MaxMessageTTLSeconds is the longest message TTL: Pulsar's field is a
// Java int.
const MaxMessageTTLSeconds = math.MaxInt32

// ValidateRetention checks a retention policy: each limit -1 (none), 0 or
// positive, both 0 (retention off) or both non-zero, and within what a
// duration and a byte count hold. Errors are HTTP 400.
func ValidateRetention(r Retention) error {
	bad := func(msg string) error { return BadRequest(errors.New(msg)) }
	switch {
	case r.RetentionSizeInMB < -1:
		return bad("Invalid retention policy: size limit must be >= -1")
	case r.RetentionTimeInMinutes < -1:
		return bad("Invalid retention policy: time limit must be >= -1")
	case (r.RetentionTimeInMinutes == 0) != (r.RetentionSizeInMB == 0):
		return bad("Invalid retention policy: Setting a single time or size limit to 0 is invalid when one of the limits has a non-zero value. Use the value of -1 instead of 0 to ignore a specific limit. To disable retention both limits must be set to 0.")
	case int64(r.RetentionTimeInMinutes) > MaxRetentionMinutes:
		return bad(fmt.Sprintf("Invalid retention policy: time limit %d minutes: at most %d (or -1 for no limit)", r.RetentionTimeInMinutes, MaxRetentionMinutes))
	case r.RetentionSizeInMB > MaxRetentionSizeMB:
		return bad(fmt.Sprintf("Invalid retention policy: size limit %d MB: at most %d (or -1 for no limit)", r.RetentionSizeInMB, MaxRetentionSizeMB))
	}
	return nil
}

// ValidateMessageTTL checks a message TTL in seconds: 0 (none) to
// MaxMessageTTLSeconds. Errors are HTTP 412, as Pulsar's.
func ValidateMessageTTL(seconds int) error {
	if seconds < 0 {
		return StatusError{Status: http.StatusPreconditionFailed, Err: errors.New("Invalid value for message TTL, message TTL must >= 0")}
	}
	if seconds > MaxMessageTTLSeconds {
		return StatusError{Status: http.StatusPreconditionFailed, Err: fmt.Errorf("Invalid value for message TTL, message TTL must be <= %d", MaxMessageTTLSeconds)}
	}
	return nil
}

// MaxEnsembleSize bounds a persistence policy's ensemble (and so its
// quorums): Pulsar refuses one above managedLedgerMaxEnsembleSize (5 by
// default). Meridian's bound is wider, for region-aware (stretched)
// ensembles over several regions, but finite: every ledger's ensemble is
// placed, stored in its metadata and written to, one bookie each.
const MaxEnsembleSize = 32

// ValidatePersistence checks a persistence policy's quorums: MaxEnsembleSize
// >= ensemble >= write quorum >= ack quorum >= 1. Errors are HTTP 400
// naming the field (Pulsar's field names).
func ValidatePersistence(v Persistence) error {
	switch {
	case v.EnsembleSize < 1 || v.EnsembleSize > MaxEnsembleSize:
		return BadRequest(fmt.Errorf("persistence: bookkeeperEnsemble %d: want 1 to %d", v.EnsembleSize, MaxEnsembleSize))
	case !(v.EnsembleSize >= v.WriteQuorum && v.WriteQuorum >= v.AckQuorum && v.AckQuorum >= 1):
		return BadRequest(fmt.Errorf("persistence: need ensemble >= write quorum >= ack quorum >= 1 (bookkeeperEnsemble, bookkeeperWriteQuorum, bookkeeperAckQuorum), got %d/%d/%d", v.EnsembleSize, v.WriteQuorum, v.AckQuorum))
	}
	return nil
}

// Backlog quota types (the keys of backlog_quota_map, Pulsar's
// BacklogQuotaType).
const (
	BacklogQuotaStorage    = "destination_storage"
	BacklogQuotaMessageAge = "message_age"
)

// ValidateBacklogQuota checks a backlog quota of type kind: a known type
// and policy, each limit -1 (none) or >= 0. Errors are HTTP 400 naming the
// field.
func ValidateBacklogQuota(kind string, q BacklogQuota) error {
	bad := func(format string, a ...any) error { return BadRequest(fmt.Errorf("backlog quota: "+format, a...)) }
	switch kind {
	case BacklogQuotaStorage, BacklogQuotaMessageAge:
	default:
		return bad("type %q: want %s or %s", kind, BacklogQuotaStorage, BacklogQuotaMessageAge)
	}
	switch q.Policy {
	case "producer_request_hold", "producer_exception", "consumer_backlog_eviction":
	default:
		return bad("policy %q: want producer_request_hold, producer_exception or consumer_backlog_eviction", q.Policy)
	}
	for _, f := range []struct {
		name string
		v    int64
	}{{"limit", q.Limit}, {"limitSize", q.LimitSize}, {"limitTime", q.LimitTime}} {
		if f.v < -1 {
			return bad("%s %d: want -1 (no limit) or >= 0", f.name, f.v)
		}
	}
	return nil
}

// ParseBacklogQuotaType reads Pulsar's ?backlogQuotaType= of the backlog
// quota routes: empty is destination_storage (Pulsar's default), else
// one of the two types. Errors are HTTP 400.
func ParseBacklogQuotaType(s string) (string, error) {
	switch s {
	case "":
		return BacklogQuotaStorage, nil
	case BacklogQuotaStorage, BacklogQuotaMessageAge:
		return s, nil
	}
	return "", BadRequest(fmt.Errorf("backlog quota: type %q: want %s or %s", s, BacklogQuotaStorage, BacklogQuotaMessageAge))
}

// BacklogQuotaFitsRetention reports whether a namespace's
// destination_storage backlog quota q (nil: none) stays below its
// retention r, as Pulsar's AdminResource.checkBacklogQuota: a retention
// with neither limit positive takes any quota; otherwise the quota's size
// limit must be below the retention's size (when positive) and its time
// limit, in seconds, below the retention's time (when positive). Only
// the destination_storage quota is compared (Pulsar checks a message_age
// quota against its broker default, which has no limits; Meridian has
// none either). r must have passed ValidateRetention, so the products
// do not overflow.
func BacklogQuotaFitsRetention(q *BacklogQuota, r Retention) bool {
	if r.RetentionSizeInMB <= 0 && r.RetentionTimeInMinutes <= 0 {
		return true
	}
	if q == nil {
		return true
	}
	if r.RetentionSizeInMB > 0 && q.SizeLimit() >= r.RetentionSizeInMB<<20 {
		return false
	}
	if r.RetentionTimeInMinutes > 0 && q.LimitTime >= int64(r.RetentionTimeInMinutes)*60 {
		return false
	}
	return true
}

// ErrRetentionBelowQuota and ErrQuotaAboveRetention are Pulsar's answers
// (HTTP 412) to a retention set below the namespace's backlog quota and
// to a backlog quota set above its retention.
var (
	ErrRetentionBelowQuota = StatusError{Status: http.StatusPreconditionFailed, Err: errors.New("Retention Quota must exceed configured backlog quota for namespace.")}
	ErrQuotaAboveRetention = StatusError{Status: http.StatusPreconditionFailed, Err: errors.New("Backlog Quota exceeds configured retention quota for namespace. Please increase retention quota and retry")}
)

// MaxRoleBytes bounds a role name (a token's subject, a certificate's
// common name) that a grant or a tenant's admin roles store.
const MaxRoleBytes = 1024

// ValidateRoleName checks a role name an admin call stores (a granted
// role, a tenant's admin role): non-empty, at most MaxRoleBytes of valid
// UTF-8 without control characters (it is shown in admin JSON, audit
// lines and error messages). Errors are HTTP 400.
func ValidateRoleName(what, role string) error {
	bad := func(format string, a ...any) error { return BadRequest(fmt.Errorf(what+": "+format, a...)) }
	switch {
	case role == "":
		return bad("empty role")
	case len(role) > MaxRoleBytes:
		return bad("role of %d bytes: at most %d", len(role), MaxRoleBytes)
	case !utf8.ValidString(role):
		return bad("role %q is not valid UTF-8", role)
	case strings.IndexFunc(role, unicode.IsControl) >= 0:
		return bad("role %q has a control character", role)
	}
	return nil
}

// authActions are Pulsar's AuthAction names (Meridian enforces produce
// and consume; the others are kept as Pulsar tooling writes them).
var authActions = map[string]bool{ActionProduce: true, ActionConsume: true,
	"functions": true, "sources": true, "sinks": true, "packages": true}

// ValidateAuthPolicies checks a namespace's raw auth_policies (Pulsar's
// JSON, as a namespace create may carry it): it decodes as AuthPolicies,
// and every role is a valid role name granted only Pulsar's actions.
// Stored unchecked, a malformed one failed every later authorization on
// the namespace (HTTP 500). Errors are HTTP 400.
func ValidateAuthPolicies(raw json.RawMessage) error {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	// Pulsar's AuthPolicies has exactly these three fields: anything else
	// is a mistake or a probe, refused rather than stored as is.
	var ap AuthPolicies
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&ap); err != nil {
		return BadRequest(fmt.Errorf("auth_policies: %v (want namespace_auth, destination_auth, subscription_auth_roles)", err))
	}
	grants := func(what string, m map[string][]string) error {
		for role, actions := range m {
			if err := ValidateRoleName("auth_policies: "+what, role); err != nil {
				return err
			}
			for _, a := range actions {
				if !authActions[a] {
					return BadRequest(fmt.Errorf("auth_policies: %s: role %q: action %q: want produce or consume", what, role, a))
				}
			}
		}
		return nil
	}
	if err := grants("namespace_auth", ap.NamespaceAuth); err != nil {
		return err
	}
	for topic, m := range ap.DestinationAuth {
		if _, err := ParseTopic(topic); err != nil {
			return BadRequest(fmt.Errorf("auth_policies: destination_auth: topic %q: %v", topic, err))
		}
		if err := grants("destination_auth", m); err != nil {
			return err
		}
	}
	for sub, roles := range ap.SubscriptionAuthRoles {
		if err := ValidSubscription(sub); err != nil {
			return BadRequest(fmt.Errorf("auth_policies: subscription_auth_roles: %v", err))
		}
		for _, role := range roles {
			if err := ValidateRoleName("auth_policies: subscription_auth_roles", role); err != nil {
				return err
			}
		}
	}
	return nil
}

// ValidateTenantInfo checks a tenant's record: its admin roles are valid
// role names and its allowed clusters valid region names. Errors are HTTP
// 400.
func ValidateTenantInfo(ti TenantInfo) error {
	for _, r := range ti.AdminRoles {
		if err := ValidateRoleName("adminRoles", r); err != nil {
			return err
		}
	}
	for _, c := range ti.AllowedClusters {
		if err := ValidateRegionName(c); err != nil {
			return BadRequest(fmt.Errorf("allowedClusters: %w", err))
		}
	}
	return nil
}

// MessageTTL is the TTL the broker enforces for a stored value: the
// value's seconds when ValidateMessageTTL takes it, else 0 (none) — a
// value stored before it was checked, which a conversion to a Duration
// would overflow (and expire everything), is not applied.
func MessageTTL(seconds int) time.Duration {
	if seconds <= 0 || ValidateMessageTTL(seconds) != nil {
		return 0
	}
	return time.Duration(seconds) * time.Second
}
