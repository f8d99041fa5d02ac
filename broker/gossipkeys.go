package broker

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"

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

// securityHandlers serves the namespace permission paths (authz.go) and
// the gossip keyring (super-users only, as every route not named in
// adminRuleFor).
func (b *Broker) securityHandlers(h func(string, func(*http.Request) (any, error)), ns func(*http.Request) string) {
	b.permissionHandlers(h, ns)
	kr := func() (GossipKeyring, error) {
		if b.cfg.Security.GossipKeys == nil {
			return nil, fmt.Errorf("%w: this broker does not gossip", meta.ErrNotFound)
		}
		return b.cfg.Security.GossipKeys, nil
	}
	h("GET /admin/v2/meridian/gossip/keys", func(r *http.Request) (any, error) {
		k, err := kr()
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
		k, err := kr()
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
		b.log.Info("gossip keyring changed through the admin API", "op", req.Op, "err", err)
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
