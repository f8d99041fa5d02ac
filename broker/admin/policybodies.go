package admin

import (
	"encoding/json"
	"errors"
	"net/url"

	"github.com/meridian-mq/meridian/broker/meta"
)

// The bodies of POST /admin/v2/namespaces/{tenant}/{ns}/{policy}: each
// decodes and validates its body and sets its policy on p, or refuses it
// (a 4xx naming the field) leaving p as it was. Pure functions, so the
// fuzz target drives exactly what the routes run; the invariant it checks
// is that a policy a route accepts is one a namespace create accepts too
// (meta.ValidatePolicies), so nothing a route stores fails a topic's load.

// policyBodies are the namespace policy routes' appliers, by path.
var policyBodies = map[string]func(p *meta.Policies, body []byte, q url.Values) error{
	"retention":     applyRetention,
	"messageTTL":    applyMessageTTL,
	"backlogQuota":  applyBacklogQuota,
	"deduplication": applyDeduplication,
	"persistence":   applyPersistence,
}

func applyRetention(p *meta.Policies, body []byte, _ url.Values) error {
	var rt meta.Retention
	if err := json.Unmarshal(body, &rt); err != nil {
		return meta.BadRequest(err)
	}
	if err := meta.ValidateRetention(rt); err != nil {
		return err
	}
	// As Pulsar's internalSetRetention (checkQuotas): 412 when the
	// namespace's backlog quota reaches the new retention.
	if q, ok := p.BacklogQuotas[meta.BacklogQuotaStorage]; ok && !meta.BacklogQuotaFitsRetention(&q, rt) {
		return meta.ErrRetentionBelowQuota
	}
	p.Retention = &rt
	return nil
}

func applyMessageTTL(p *meta.Policies, body []byte, _ url.Values) error {
	var ttl int
	if err := json.Unmarshal(body, &ttl); err != nil {
		return meta.BadRequest(err)
	}
	if err := meta.ValidateMessageTTL(ttl); err != nil {
		return err
	}
	p.MessageTTLInSeconds = ttl
	return nil
}

// applyBacklogQuota takes Pulsar's ?backlogQuotaType= (default
// destination_storage).
func applyBacklogQuota(p *meta.Policies, body []byte, q url.Values) error {
	var bq meta.BacklogQuota
	if err := json.Unmarshal(body, &bq); err != nil {
		return meta.BadRequest(err)
	}
	kind, err := meta.ParseBacklogQuotaType(q.Get("backlogQuotaType"))
	if err != nil {
		return err
	}
	if err := meta.ValidateBacklogQuota(kind, bq); err != nil {
		return err
	}
	// As Pulsar's setBacklogQuotaAsync: 412 when a destination_storage
	// quota reaches the namespace's retention.
	if r := p.Retention; r != nil && kind == meta.BacklogQuotaStorage && !meta.BacklogQuotaFitsRetention(&bq, *r) {
		return meta.ErrQuotaAboveRetention
	}
	if p.BacklogQuotas == nil {
		p.BacklogQuotas = map[string]meta.BacklogQuota{}
	}
	p.BacklogQuotas[kind] = bq
	return nil
}

func applyDeduplication(p *meta.Policies, body []byte, _ url.Values) error {
	var v *bool
	if err := json.Unmarshal(body, &v); err != nil {
		return meta.BadRequest(err)
	}
	if v == nil {
		return meta.BadRequest(errors.New("deduplication: want true or false"))
	}
	p.Deduplication = v
	return nil
}

func applyPersistence(p *meta.Policies, body []byte, _ url.Values) error {
	var v meta.Persistence
	if err := json.Unmarshal(body, &v); err != nil {
		return meta.BadRequest(err)
	}
	if err := meta.ValidatePersistence(v); err != nil {
		return err
	}
	p.Persistence = &v
	return nil
}

// removeBacklogQuota is DELETE .../backlogQuota: it removes the quota of
// Pulsar's ?backlogQuotaType= (default destination_storage) and no other.
func removeBacklogQuota(p *meta.Policies, q url.Values) error {
	kind, err := meta.ParseBacklogQuotaType(q.Get("backlogQuotaType"))
	if err != nil {
		return err
	}
	delete(p.BacklogQuotas, kind)
	return nil
}
