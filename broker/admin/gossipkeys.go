package admin

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"slices"

	"github.com/meridian-mq/meridian/broker/meta"
	"github.com/meridian-mq/meridian/cluster"
)

// GossipKeyring rotates the gossip encryption keys of every member
// (cluster.Membership: serf's KeyManager, which asks every member and
// fails unless all of them did it). Rotation: install the new key, use
// it, remove the old one, each step done everywhere before the next.
type GossipKeyring interface {
	InstallKey(key []byte) error
	UseKey(key []byte) error
	RemoveKey(key []byte) error
	ListKeys() (cluster.KeyringStatus, error)
}

// gossipKeyRequest is the body of POST /admin/v2/meridian/gossip/keys.
// The key is a secret: send it over https, and it is never logged.
type gossipKeyRequest struct {
	Op  string `json:"op"`  // install | use | remove
	Key string `json:"key"` // base64 of 16, 24 or 32 bytes
}

// securityHandlers serves the namespace permission paths and the gossip
// keyring (super-users only, as every route not named in security's
// adminRuleFor).
func (s *Server) securityHandlers(h func(string, func(*http.Request) (any, error)), ns func(*http.Request) string) {
	s.permissionHandlers(h, ns)
	// The keyring is a secret: never served to an unauthenticated caller,
	// whatever the authorization setting (no Auth: refused).
	kr := func(r *http.Request) (GossipKeyring, error) {
		if s.cfg.Auth == nil {
			return nil, meta.StatusError{Status: http.StatusForbidden, Err: errors.New("serving the gossip keyring needs authentication")}
		}
		if err := s.cfg.Auth.AuthorizeSecret(r); err != nil {
			return nil, err
		}
		if s.cfg.GossipKeys == nil {
			return nil, fmt.Errorf("%w: this broker does not gossip", meta.ErrNotFound)
		}
		return s.cfg.GossipKeys, nil
	}
	h("GET /admin/v2/meridian/gossip/keys", func(r *http.Request) (any, error) {
		k, err := kr(r)
		if err != nil {
			return nil, err
		}
		st, err := k.ListKeys()
		if err != nil {
			return nil, gossipKeyErr(err)
		}
		return map[string]any{"members": st.Members, "keys": st.Keys, "primaryKeys": st.PrimaryKeys}, nil
	})
	h("POST /admin/v2/meridian/gossip/keys", func(r *http.Request) (any, error) {
		k, err := kr(r)
		if err != nil {
			return nil, err
		}
		var req gossipKeyRequest
		if err := readJSON(r, &req, false); err != nil {
			return nil, err
		}
		key, err := base64.StdEncoding.DecodeString(req.Key)
		if err != nil {
			return nil, meta.BadRequest(errors.New("key: not base64"))
		}
		switch req.Op {
		case "install":
			err = k.InstallKey(key)
		case "use":
			err = k.UseKey(key)
		case "remove":
			err = k.RemoveKey(key)
		default:
			return nil, meta.BadRequest(fmt.Errorf("op %q: want install, use or remove", req.Op))
		}
		s.log().Info("gossip keyring changed through the admin API", "op", req.Op, "err", err)
		return nil, gossipKeyErr(err)
	})
}

func gossipKeyErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, cluster.ErrGossipNotEncrypted):
		return meta.StatusError{Status: http.StatusPreconditionFailed, Err: err}
	case errors.Is(err, cluster.ErrKeyring):
		return meta.StatusError{Status: http.StatusConflict, Err: err}
	}
	return meta.BadRequest(err)
}

// permissionHandlers serves Pulsar's namespace permission paths:
// GET .../permissions, POST and DELETE .../permissions/{role} (the body of
// POST is the list of actions, e.g. ["produce","consume"]).
func (s *Server) permissionHandlers(h func(string, func(*http.Request) (any, error)), ns func(*http.Request) string) {
	h("GET /admin/v2/namespaces/{tenant}/{ns}/permissions", func(r *http.Request) (any, error) {
		p, err := s.cfg.Meta.GetPolicies(r.Context(), ns(r))
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
		if err := meta.ValidateRoleName("permissions", role); err != nil {
			return nil, err
		}
		slices.Sort(actions)
		actions = slices.Compact(actions)
		return nil, s.cfg.Meta.UpdateAuthPolicies(r.Context(), ns(r), func(ap *meta.AuthPolicies) {
			ap.NamespaceAuth[role] = actions
		})
	})
	h("DELETE /admin/v2/namespaces/{tenant}/{ns}/permissions/{role}", func(r *http.Request) (any, error) {
		return nil, s.cfg.Meta.UpdateAuthPolicies(r.Context(), ns(r), func(ap *meta.AuthPolicies) {
			delete(ap.NamespaceAuth, r.PathValue("role"))
		})
	})
}
