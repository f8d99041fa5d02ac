package meta

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
)

// Actions a namespace grants (Pulsar's AuthAction names).
const (
	ActionProduce = "produce"
	ActionConsume = "consume"
)

// AuthPolicies is Pulsar's auth_policies of a namespace's policies.
type AuthPolicies struct {
	// NamespaceAuth: role → the actions granted on the whole namespace.
	NamespaceAuth map[string][]string `json:"namespace_auth"`
	// DestinationAuth: topic → role → actions (Pulsar's per-topic
	// grants; kept, and honoured for that topic).
	DestinationAuth map[string]map[string][]string `json:"destination_auth"`
	// SubscriptionAuthRoles: kept as Pulsar writes it, not enforced.
	SubscriptionAuthRoles map[string][]string `json:"subscription_auth_roles"`
}

// authPolicies decodes p's auth_policies (empty when absent).
func DecodeAuthPolicies(p Policies) (AuthPolicies, error) {
	var ap AuthPolicies
	if len(p.AuthPolicies) > 0 && string(p.AuthPolicies) != "null" {
		if err := json.Unmarshal(p.AuthPolicies, &ap); err != nil {
			return ap, fmt.Errorf("broker: auth_policies: %w", err)
		}
	}
	if ap.NamespaceAuth == nil {
		ap.NamespaceAuth = map[string][]string{}
	}
	if ap.DestinationAuth == nil {
		ap.DestinationAuth = map[string]map[string][]string{}
	}
	if ap.SubscriptionAuthRoles == nil {
		ap.SubscriptionAuthRoles = map[string][]string{}
	}
	return ap, nil
}

// UpdateAuthPolicies applies f to a namespace's auth_policies (a
// compare-and-swap on the policies, as every policy change).
func (m *Metadata) UpdateAuthPolicies(ctx context.Context, ns string, f func(*AuthPolicies)) error {
	return m.UpdatePoliciesErr(ctx, ns, func(p *Policies) error {
		ap, err := DecodeAuthPolicies(*p)
		if err != nil {
			return err
		}
		f(&ap)
		raw, err := json.Marshal(ap)
		if err != nil {
			return err
		}
		p.AuthPolicies = raw
		return nil
	})
}

// Roles lists the roles granted something on a namespace, sorted (tests,
// tools).
func (ap AuthPolicies) Roles() []string {
	var out []string
	for r := range ap.NamespaceAuth {
		out = append(out, r)
	}
	sort.Strings(out)
	return out
}
