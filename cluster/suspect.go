package cluster

import (
	"fmt"
	"reflect"
	"sync"

	"github.com/hashicorp/memberlist"
)

// suspectReader reads which members memberlist currently suspects.
//
// Why this exists: serf (v0.11.0) reports a member alive until memberlist
// declares it dead; memberlist's suspicion — the SuspicionTimeouts window
// in which a member missed its probes and may still refute — is visible
// only as Node.State in memberlist.Members(). But Members() returns
// pointers into memberlist's live node table, and State (like Addr, Meta)
// is rewritten under memberlist's nodeLock, so reading it after Members()
// returns is a data race (hashicorp/memberlist#306 and #250, open; the fix,
// #376, is not released). No delegate reports suspicion either: serf owns
// the Events and Conflict delegates, the Ping delegate only sees successful
// direct probes, and the Alive delegate only alive messages.
//
// So this reads the node table the way memberlist itself does: under its
// nodeLock (read-locked), copying only each node's name and state. The
// field names and types are checked once against the memberlist in go.mod
// (v0.7.0); if a newer memberlist no longer matches, newSuspectReader fails,
// the membership logs it and runs without suspicion (members go from alive
// straight to failed), and TestSuspectReaderMatchesMemberlist fails so the
// upgrade cannot go unnoticed. Delete this file when memberlist returns
// copies from Members().
type suspectReader struct {
	lock  *sync.RWMutex
	nodes reflect.Value // the []*nodeState field; read only under lock
	name  []int         // field index of nodeState.Node.Name
	state []int         // field index of nodeState.State
}

func newSuspectReader(ml *memberlist.Memberlist) (*suspectReader, error) {
	if ml == nil {
		return nil, fmt.Errorf("no memberlist")
	}
	v := reflect.ValueOf(ml).Elem()
	lock := v.FieldByName("nodeLock")
	if !lock.IsValid() || lock.Type() != reflect.TypeFor[sync.RWMutex]() {
		return nil, fmt.Errorf("memberlist.Memberlist has no nodeLock sync.RWMutex")
	}
	nodes := v.FieldByName("nodes")
	if !nodes.IsValid() || nodes.Kind() != reflect.Slice || nodes.Type().Elem().Kind() != reflect.Pointer ||
		nodes.Type().Elem().Elem().Kind() != reflect.Struct {
		return nil, fmt.Errorf("memberlist.Memberlist has no nodes []*nodeState")
	}
	st := nodes.Type().Elem().Elem()
	name, ok := st.FieldByName("Name")
	if !ok || name.Type.Kind() != reflect.String {
		return nil, fmt.Errorf("memberlist nodeState has no Name string")
	}
	state, ok := st.FieldByName("State")
	if !ok || state.Type != reflect.TypeFor[memberlist.NodeStateType]() || len(state.Index) != 1 {
		return nil, fmt.Errorf("memberlist nodeState has no State NodeStateType")
	}
	return &suspectReader{
		lock:  (*sync.RWMutex)(lock.Addr().UnsafePointer()),
		nodes: nodes,
		name:  name.Index,
		state: state.Index,
	}, nil
}

// suspects returns the names of the members memberlist has suspect now.
func (r *suspectReader) suspects() map[string]bool {
	var out map[string]bool
	r.lock.RLock()
	defer r.lock.RUnlock()
	for i, n := 0, r.nodes.Len(); i < n; i++ {
		ns := r.nodes.Index(i).Elem()
		if memberlist.NodeStateType(ns.FieldByIndex(r.state).Int()) != memberlist.StateSuspect {
			continue
		}
		if out == nil {
			out = map[string]bool{}
		}
		out[ns.FieldByIndex(r.name).String()] = true
	}
	return out
}
