package cluster

import (
	"bytes"
	"encoding/base64"
	"errors"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/serf/serf"
)

// judgeKeys: what is pending, when sending is behind, when it is unsafe.
func TestJudgeKeys(t *testing.T) {
	const old, nw = "OLD", "NEW"
	both := func(primary string) memberKeys {
		return memberKeys{Result: true, Keys: []string{primary, map[string]string{old: nw, nw: old}[primary]}, PrimaryKey: primary}
	}
	only := func(k string) memberKeys { return memberKeys{Result: true, Keys: []string{k}, PrimaryKey: k} }
	round := func(answers map[string]memberKeys, failed ...string) keyRound {
		r := keyRound{answers: answers, failed: failed}
		for _, n := range []string{"a", "b", "c"} {
			if !slices.Contains(failed, n) {
				r.alive = append(r.alive, n)
			}
		}
		return r
	}
	for _, c := range []struct {
		name          string
		op, key       string
		r             keyRound
		pending       string // describePending
		behind, unsaf bool
	}{
		{"install done", "install", nw, round(map[string]memberKeys{"a": both(old), "b": both(old), "c": both(old)}), "", false, false},
		{"install on one", "install", nw, round(map[string]memberKeys{"a": both(old), "b": only(old), "c": both(old)}), "b: does not hold the key yet", true, false},
		{"install, a member silent", "install", nw, round(map[string]memberKeys{"a": both(old), "b": both(old)}), "c: did not answer", false, false},
		{"install, a member failed", "install", nw, round(map[string]memberKeys{"a": both(old), "b": both(old)}, "c"), "c: failed: cannot be asked", false, false},
		{"use done", "use", nw, round(map[string]memberKeys{"a": both(nw), "b": both(nw), "c": both(nw)}), "", false, false},
		{"use late on one", "use", nw, round(map[string]memberKeys{"a": both(nw), "b": both(old), "c": both(nw)}), "b: does not send with the key yet", true, false},
		{"use, a member without the key", "use", nw, round(map[string]memberKeys{"a": both(old), "b": only(old), "c": both(old)}), "a: does not send with the key yet; b: does not hold the key (install it first); c: does not send with the key yet", true, true},
		{"use, a member silent", "use", nw, round(map[string]memberKeys{"a": both(nw), "b": both(old)}), "b: does not send with the key yet; c: did not answer", true, true},
		{"use, a member failed", "use", nw, round(map[string]memberKeys{"a": both(nw), "b": both(nw)}, "c"), "c: failed: cannot be asked", false, true},
		{"remove done", "remove", old, round(map[string]memberKeys{"a": only(nw), "b": only(nw), "c": only(nw)}), "", false, false},
		{"remove due", "remove", old, round(map[string]memberKeys{"a": both(nw), "b": both(nw), "c": only(nw)}), "a: still holds the key; b: still holds the key", true, false},
		{"remove, one still sends with it", "remove", old, round(map[string]memberKeys{"a": both(nw), "b": both(old), "c": both(nw)}), "a: still holds the key; b: still sends with the key (use the new key first); c: still holds the key", true, true},
		{"remove, a member failed", "remove", old, round(map[string]memberKeys{"a": both(nw), "b": both(nw)}, "c"), "a: still holds the key; b: still holds the key; c: failed: cannot be asked", true, true},
		{"remove, an error answer", "remove", old, round(map[string]memberKeys{"a": only(nw), "b": {Message: "boom"}, "c": only(nw)}), "b: answered with an error: boom", false, true},
		{"list, a member failed", "list", "", round(map[string]memberKeys{"a": both(nw), "b": both(nw)}, "c"), "", false, false},
		{"list, a member silent", "list", "", round(map[string]memberKeys{"a": both(nw), "b": both(nw)}), "c: did not answer", false, false},
		{"a member seen failed answers", "use", nw, keyRound{alive: []string{"a"}, failed: []string{"b"}, answers: map[string]memberKeys{"a": both(nw), "b": both(old)}}, "b: does not send with the key yet", true, false},
	} {
		p := judgeKeys(c.op, c.key, c.r)
		if got := describePending(p.pending); got != c.pending || p.behind != c.behind || p.unsafe != c.unsaf {
			t.Errorf("%s: pending %q behind %v unsafe %v; want %q %v %v", c.name, got, p.behind, p.unsafe, c.pending, c.behind, c.unsaf)
		}
	}
}

// keyringIs fails unless every member's keyring (read directly, not over
// gossip) holds exactly keys, primary first.
func keyringIs(t *testing.T, ms []*Membership, keys ...[]byte) {
	t.Helper()
	for _, m := range ms {
		got := m.keyring.GetKeys()
		ok := len(got) == len(keys)
		for i := 0; ok && i < len(keys); i++ {
			ok = bytes.Equal(got[i], keys[i])
		}
		if !ok {
			t.Fatalf("%s holds %d keys, primary %x...; want %d, primary %x...", m.LocalName(), len(got), m.keyring.GetPrimaryKey()[:1], len(keys), keys[0][:1])
		}
	}
}

// The flake's cause, made certain: every member applies each step but no
// answer reaches the asking member within serf's query window (here the
// window is 0; on a loaded machine answers missed the 800 ms window three
// times in a row). A step is judged by the members' keyrings, so the
// rotation succeeds.
func TestKeyRotationWhenAnswersAreLost(t *testing.T) {
	t.Cleanup(noLeaks(t))
	k1, k3 := bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{3}, 32)
	ms := startCluster(t, fourMembers[:3], k1, func(c *MembershipConfig) {
		c.tuneSerf = func(sc *serf.Config) { sc.QueryTimeoutMult = 0 }
	})
	if _, err := ms[0].serf.KeyManager().InstallKey(base64.StdEncoding.EncodeToString(k1)); err == nil {
		t.Fatal("serf's own key query got every answer in a 0 s window: the fault is not injected")
	}
	if err := ms[0].InstallKey(k3); err != nil {
		t.Fatal(err)
	}
	keyringIs(t, ms, k1, k3)
	if err := ms[1].UseKey(k3); err != nil {
		t.Fatal(err)
	}
	keyringIs(t, ms, k3, k1)
	if err := ms[2].RemoveKey(k1); err != nil {
		t.Fatal(err)
	}
	keyringIs(t, ms, k3)
	st, err := ms[0].ListKeys()
	if k := base64.StdEncoding.EncodeToString(k3); err != nil || st.Members != 3 || st.Keys[k] != 3 || st.PrimaryKeys[k] != 3 || len(st.Keys) != 1 {
		t.Fatalf("ListKeys: %+v, %v", st, err)
	}
	for _, m := range ms {
		m.Shutdown()
	}
}

// A member that still sends with the old key (it missed "use": it was held
// failed while "use" ran) is not cut off by "remove": the remove is not
// sent, the error names the member, and once "use" is repeated the remove
// goes through with every member alive.
func TestRemoveKeyNotSentWhileAMemberSendsWithIt(t *testing.T) {
	t.Cleanup(noLeaks(t))
	k1, k3 := bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{3}, 32)
	ms := startCluster(t, fourMembers[:3], k1, nil)
	if err := ms[0].InstallKey(k3); err != nil {
		t.Fatal(err)
	}
	if err := ms[0].UseKey(k3); err != nil {
		t.Fatal(err)
	}
	if err := ms[2].keyring.UseKey(k1); err != nil { // the member that missed "use"
		t.Fatal(err)
	}
	ms[0].keyWait = time.Second
	err := ms[0].RemoveKey(k1)
	if !errors.Is(err, ErrKeyring) || !strings.Contains(err.Error(), fourMembers[2].name+": still sends with the key") || !strings.Contains(err.Error(), "not sent") {
		t.Fatalf("remove while %s sends with the key: %v", fourMembers[2].name, err)
	}
	keyringIs(t, ms[:2], k3, k1)
	keyringIs(t, ms[2:], k1, k3)
	ms[0].keyWait = keyOpWait
	if err := ms[0].UseKey(k3); err != nil {
		t.Fatal(err)
	}
	if err := ms[0].RemoveKey(k1); err != nil {
		t.Fatal(err)
	}
	keyringIs(t, ms, k3)
	for _, m := range ms {
		if v := m.Snapshot(); countState(v, MemberAlive)+countState(v, MemberSuspect) != 3 {
			t.Fatalf("%s sees%s", m.LocalName(), describe(v))
		}
	}
	for _, m := range ms {
		m.Shutdown()
	}
}

// A member held failed cannot be asked: a step waits for it, ends with an
// error naming it if it does not come back (applied on the others; "use"
// not sent, as it would cut the member off should it come back without the
// key), and completes on it once it is back.
func TestKeyringStepWaitsForFailedMember(t *testing.T) {
	t.Cleanup(noLeaks(t))
	k1, k3 := bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{3}, 32)
	ms := startCluster(t, fourMembers[:3], k1, nil)
	victim := fourMembers[2].name
	_, port, _ := net.SplitHostPort(ms[2].GossipAddr())
	ms[2].Shutdown() // a crash: no leave
	waitView(t, ms[0], 2*FastLocalConfig().FailureDetectionBound(3), "victim failed", func(v HealthView) bool { return v.IsFailed(victim) })

	ms[0].keyWait = time.Second
	if err := ms[0].InstallKey(k3); !errors.Is(err, ErrKeyring) || !strings.Contains(err.Error(), victim+": failed: cannot be asked") {
		t.Fatalf("install with %s failed: %v", victim, err)
	}
	keyringIs(t, ms[:2], k1, k3)
	if err := ms[0].UseKey(k3); !errors.Is(err, ErrKeyring) || !strings.Contains(err.Error(), "not sent") {
		t.Fatalf("use with %s failed: %v", victim, err)
	}
	keyringIs(t, ms[:2], k1, k3)

	// It comes back (restarted from its config: the old key only) while
	// the install waits for it.
	ms[0].keyWait = keyOpWait
	done := make(chan error, 1)
	go func() { done <- ms[0].InstallKey(k3) }()
	cfg := memberConfig(t, fourMembers[2], []string{ms[0].GossipAddr()}, k1)
	cfg.BindPort, _ = strconv.Atoi(port)
	back := join(t, cfg)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	ms[2] = back
	keyringIs(t, ms, k1, k3)
	if err := ms[1].UseKey(k3); err != nil {
		t.Fatal(err)
	}
	if err := ms[1].RemoveKey(k1); err != nil {
		t.Fatal(err)
	}
	keyringIs(t, ms, k3)
	for _, m := range ms {
		m.Shutdown()
	}
}

// Meridian reads serf's list-keys answers itself (keyring.go): its
// reading agrees with serf's KeyManager. Fails if a serf upgrade changes
// the query or its answers.
func TestKeyringListMatchesSerf(t *testing.T) {
	t.Cleanup(noLeaks(t))
	k1, k3 := bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{3}, 16)
	ms := startCluster(t, fourMembers[:2], k1, nil)
	if _, err := ms[0].serf.KeyManager().InstallKey(base64.StdEncoding.EncodeToString(k3)); err != nil {
		t.Fatal(err)
	}
	want, err := ms[1].serf.KeyManager().ListKeys()
	if err != nil {
		t.Fatal(err)
	}
	r, err := ms[1].askKeys()
	if err != nil {
		t.Fatal(err)
	}
	for n, a := range r.answers {
		if !a.Result || a.Message != "" {
			t.Errorf("%s answered %+v", n, a)
		}
	}
	got := r.status()
	if got.Members != want.NumResp || got.Members != 2 || !maps.Equal(got.Keys, want.Keys) || !maps.Equal(got.PrimaryKeys, want.PrimaryKeys) {
		t.Fatalf("read %+v; serf read %+v", got, want)
	}
	for _, m := range ms {
		m.Shutdown()
	}
}
