package cluster

import (
	"encoding/base64"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/go-msgpack/v2/codec"
	"github.com/hashicorp/serf/serf"
)

// Rotating the gossip encryption keys of every member (serf's keyring).
//
// serf's KeyManager sends a key query and counts the answers that reach the
// asking member within one query window (GossipInterval × 16 × ⌈log10(N+1)⌉:
// 800 ms with FastLocalConfig); the members it expects are the ones
// memberlist does not hold dead at that moment. Taken as the outcome of a
// step, that count is wrong both ways:
//   - a member that applied the change but whose answer came late (a loaded
//     host) or was lost failed the step, though the cluster was as wanted;
//   - a member that did not apply it (held dead by the asking member during
//     the query, or refusing) was not counted, or a "remove" went out while
//     a member still sent with the key: the others dropped the key, nobody
//     could read that member any more, it was declared failed, and the
//     retry that followed (now without it) reported success.
//
// So each step here is judged by the state of every member's keyring, asked
// member by member (serf's list-keys query, with a window of at least
// keyListWindowMin, ended as soon as every member answered), and repeated
// until every member is in the wanted state or keyOpWait has passed. "use"
// and "remove" are sent only when every member is known to be ready for
// them (holds the key; no longer sends with it): sent to a member that is
// not, they cut it off. A failed member cannot be asked, so it holds a step
// until it is back or the wait ends with ErrKeyring naming it.

// KeyringStatus is the cluster's gossip keyring, as its members report it.
type KeyringStatus struct {
	// Members is how many members answered (every alive one, unless
	// ListKeys returned an error).
	Members int
	// Keys maps each installed key (base64) to how many members hold it;
	// PrimaryKeys, each key members send with to how many use it.
	Keys, PrimaryKeys map[string]int
}

const (
	// keyOpWait bounds how long a keyring operation waits for every member
	// to be in the wanted state, below the admin API's 30 s per request.
	// A cluster in good health answers in one round (milliseconds).
	keyOpWait = 20 * time.Second
	// keyListWindowMin is the least time a round waits for members'
	// answers (serf's default window is used when longer). serf's 800 ms
	// (FastLocalConfig) was missed by every member three times in a row on
	// a loaded 2-core machine. A round ends as soon as every member answered.
	keyListWindowMin = 2 * time.Second
	// keyRoundPause separates rounds, so a change sent has time to spread.
	keyRoundPause = 200 * time.Millisecond

	// serfListKeys and serfKeyResponseType are serf's internal list-keys
	// query and the type byte of its answers (serf/internal_query.go,
	// serf/messages.go: messageKeyResponseType), part of serf's wire
	// protocol; TestKeyringListMatchesSerf fails if an upgrade moves them.
	serfListKeys        = serf.InternalQueryPrefix + "list-keys"
	serfKeyResponseType = 8
)

// memberKeys is one member's answer to serf's list-keys query (serf's
// nodeKeyResponse, msgpack after the type byte).
type memberKeys struct {
	Result     bool
	Message    string
	Keys       []string // base64
	PrimaryKey string   // base64
}

func decodeMemberKeys(p []byte) (memberKeys, error) {
	var a memberKeys
	if len(p) < 1 || p[0] != serfKeyResponseType {
		return a, fmt.Errorf("not a key list answer")
	}
	if err := codec.NewDecoderBytes(p[1:], &codec.MsgpackHandle{}).Decode(&a); err != nil {
		return memberKeys{}, fmt.Errorf("undecodable key list answer: %v", err)
	}
	return a, nil
}

// keyRound is one look at every member's keyring.
type keyRound struct {
	alive   []string              // members serf holds alive (suspect ones too): expected to answer
	failed  []string              // members serf holds failed: they cannot be asked
	answers map[string]memberKeys // by member name
}

// keyProgress is how far an operation got, by keyProgress.
type keyProgress struct {
	pending map[string]string // members not in the wanted state, and why
	behind  bool              // a member answered and has not applied it yet
	unsafe  bool              // sending it now could cut a member off
}

// judgeKeys judges op (install, use, remove or list) with key (base64) on
// round r. Pure.
func judgeKeys(op, key string, r keyRound) keyProgress {
	p := keyProgress{pending: map[string]string{}}
	names := slices.Clone(r.alive)
	for n := range r.answers {
		if !slices.Contains(names, n) {
			names = append(names, n) // answered though not seen alive: judge it
		}
	}
	for _, n := range names {
		a, ok := r.answers[n]
		switch {
		case !ok:
			p.pending[n] = "did not answer"
			p.unsafe = true
		case !a.Result:
			p.pending[n] = "answered with an error: " + a.Message
			p.unsafe = true
		default:
			holds := slices.Contains(a.Keys, key)
			switch op {
			case "install":
				if !holds {
					p.pending[n] = "does not hold the key yet"
					p.behind = true
				}
			case "use":
				if !holds {
					p.pending[n] = "does not hold the key (install it first)"
					p.unsafe = true
				} else if a.PrimaryKey != key {
					p.pending[n] = "does not send with the key yet"
					p.behind = true
				}
			case "remove":
				if a.PrimaryKey == key {
					p.pending[n] = "still sends with the key (use the new key first)"
					p.unsafe = true
				} else if holds {
					p.pending[n] = "still holds the key"
					p.behind = true
				}
			}
		}
	}
	if op == "list" {
		p.unsafe = false // nothing is sent; a failed member is not waited for
		return p
	}
	for _, n := range r.failed {
		if _, ok := r.answers[n]; !ok {
			p.pending[n] = "failed: cannot be asked"
			p.unsafe = true
		}
	}
	if op == "install" {
		p.unsafe = false // holding one more key harms nobody
	}
	return p
}

// InstallKey adds key (16, 24 or 32 bytes) to every member's keyring; they
// then accept messages under it but still send with their primary key.
// Rotation: InstallKey(new), UseKey(new), RemoveKey(old), each step on
// every member before the next (each returns ErrKeyring otherwise, naming
// the members it could not get to the wanted state, and why). Each step
// is idempotent: repeat it.
func (m *Membership) InstallKey(key []byte) error {
	_, err := m.keyOp("install", key)
	return err
}

// UseKey makes key every member's primary (sending) key. It is sent only
// once every member holds key: a member without it would be cut off.
func (m *Membership) UseKey(key []byte) error {
	_, err := m.keyOp("use", key)
	return err
}

// RemoveKey removes key from every member's keyring. It is sent only once
// no member sends with key any more (every member reports another primary
// key): the others could no longer read a member that still does.
func (m *Membership) RemoveKey(key []byte) error {
	_, err := m.keyOp("remove", key)
	return err
}

// ListKeys asks every alive member for its keys.
func (m *Membership) ListKeys() (KeyringStatus, error) {
	return m.keyOp("list", nil)
}

func (m *Membership) keyOp(op string, key []byte) (KeyringStatus, error) {
	if m.down.Load() {
		return KeyringStatus{}, ErrMembershipClosed
	}
	if !m.serf.EncryptionEnabled() {
		return KeyringStatus{}, ErrGossipNotEncrypted
	}
	if key != nil {
		if err := validKey(key); err != nil {
			return KeyringStatus{}, fmt.Errorf("cluster: %s gossip key: %w", op, err)
		}
	}
	m.keyMu.Lock()
	defer m.keyMu.Unlock()
	k := base64.StdEncoding.EncodeToString(key)
	deadline := time.Now().Add(m.keyWait)
	sent, warned := 0, false
	for {
		r, err := m.askKeys()
		if err != nil {
			return KeyringStatus{}, fmt.Errorf("cluster: %s gossip key: %w", op, err)
		}
		p := judgeKeys(op, k, r)
		if len(p.pending) == 0 {
			m.log.Info("gossip: keyring "+op, "members", len(r.answers), "sent", sent)
			return r.status(), nil
		}
		if !time.Now().Before(deadline) {
			err := keyringError(op, p, sent)
			m.log.Warn("gossip: keyring "+op+" incomplete", "err", err)
			return r.status(), err
		}
		if !warned && (!p.behind || p.unsafe || sent > 0) { // not the first send of a step
			m.log.Warn("gossip: keyring "+op+": waiting for members", "pending", describePending(p.pending))
			warned = true
		}
		if p.behind && !p.unsafe {
			sent++
			if m.sendKeyOp(op, k) {
				continue // every member answered it: look again at once
			}
		}
		select {
		case <-m.stop:
			return KeyringStatus{}, ErrMembershipClosed
		case <-time.After(keyRoundPause):
		}
	}
}

// sendKeyOp sends op to every member through serf's KeyManager and
// reports whether every member it expected answered it without error.
// That is not the outcome (the next round is): a refusal is logged, and
// shows in the next round too.
func (m *Membership) sendKeyOp(op, key string) bool {
	km := m.serf.KeyManager()
	f := map[string]func(string) (*serf.KeyResponse, error){"install": km.InstallKey, "use": km.UseKey, "remove": km.RemoveKey}[op]
	resp, err := f(key)
	if err != nil && resp != nil && resp.NumErr > 0 {
		m.log.Warn("gossip: keyring "+op+": refused by members", "answers", describePending(resp.Messages))
	}
	return err == nil
}

// askKeys asks every member for its keyring with serf's list-keys query,
// until every member serf holds alive answered or the window ended.
func (m *Membership) askKeys() (keyRound, error) {
	r := keyRound{answers: map[string]memberKeys{}}
	want := map[string]bool{}
	for _, mb := range m.serf.Members() {
		switch mb.Status {
		case serf.StatusAlive:
			r.alive = append(r.alive, mb.Name)
			want[mb.Name] = true
		case serf.StatusFailed:
			r.failed = append(r.failed, mb.Name)
		}
	}
	if m.down.Load() {
		return r, ErrMembershipClosed
	}
	// Only the members seen alive are asked. A member seen failed may be
	// a process starting again at the same address, and serf v0.11.0
	// answers a query that reaches it before serf.Create has set its
	// memberlist with a nil dereference (TestKeyringStepWaitsForFailedMember
	// panicked so once in 60 runs before this filter); it is asked once
	// seen alive.
	resp, err := m.serf.Query(serfListKeys, nil, &serf.QueryParam{FilterNodes: r.alive, Timeout: max(m.serf.DefaultQueryTimeout(), keyListWindowMin)})
	if err != nil {
		return r, err
	}
	defer resp.Close()
	for nr := range resp.ResponseCh() {
		a, err := decodeMemberKeys(nr.Payload)
		if err != nil {
			a = memberKeys{Message: err.Error()}
		}
		r.answers[nr.From] = a
		delete(want, nr.From)
		if len(want) == 0 {
			break
		}
	}
	return r, nil
}

func (r keyRound) status() KeyringStatus {
	st := KeyringStatus{Keys: map[string]int{}, PrimaryKeys: map[string]int{}}
	for _, a := range r.answers {
		if !a.Result {
			continue
		}
		st.Members++
		for _, k := range a.Keys {
			st.Keys[k]++
		}
		st.PrimaryKeys[a.PrimaryKey]++
	}
	return st
}

func keyringError(op string, p keyProgress, sent int) error {
	what := ""
	switch {
	case op == "list":
	case sent == 0 && p.unsafe:
		what = "not sent, as it would cut those members off; "
	case sent > 0:
		what = fmt.Sprintf("sent %d times; ", sent)
	}
	return fmt.Errorf("cluster: %s gossip key: %w: %s%d members not done: %s", op, ErrKeyring, what, len(p.pending), describePending(p.pending))
}

func describePending(p map[string]string) string {
	var out []string
	for n, why := range p {
		out = append(out, n+": "+why)
	}
	slices.Sort(out)
	return strings.Join(out, "; ")
}
