package admin

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/meridian-mq/meridian/broker/meta"
)

// Long operations (issue 30, item 5). A POST to a route in asyncRoutes
// whose request asks "Prefer: respond-async" (RFC 7240) is answered at
// once with 202 Accepted, a Location header naming
// /admin/v2/meridian/operations/{id} and the operation's state; the
// operation runs on, past the request, for at most asyncOpTimeout. GET on
// its Location answers its state, and once it ended its result (what the
// synchronous call would have answered) or its error. Without the header
// the call answers when done, within the 30 s every call is given, as
// before: the HTTP server's write timeout (60 s) outlasts it either way.
// Reading an operation needs a super-user (security: a route the rules do
// not name), as starting one does.

// asyncRoutes are the routes that may answer 202: a manual failover
// (a planned switchover) waits for the global store's commit.
var asyncRoutes = map[string]bool{
	"POST /admin/v2/meridian/failover/{tenant}/{ns}": true,
	"POST /admin/v2/meridian/failover":               true, // region-wide
}

const (
	// asyncOpTimeout bounds an operation answered 202.
	asyncOpTimeout = 5 * time.Minute
	// maxOperations bounds the operations remembered: past it the oldest
	// ended one is forgotten; with all of them running, one more is
	// refused with 503.
	maxOperations = 256
	// operationsPath is where an operation's state is read.
	operationsPath = "/admin/v2/meridian/operations/"
)

// Operation is a long operation's state as GET answers it.
type Operation struct {
	ID    string `json:"id"`
	Route string `json:"route"` // the route's pattern, "POST /admin/v2/..."
	// State is "running", "succeeded" or "failed".
	State     string     `json:"state"`
	StatusURL string     `json:"statusUrl"` // path of GET
	Started   time.Time  `json:"started"`
	Finished  *time.Time `json:"finished,omitempty"`
	// Result: what the synchronous call would have answered; a failed
	// operation may carry one too (what it did before it failed).
	Result any    `json:"result,omitempty"`
	Error  string `json:"error,omitempty"`
}

type operations struct {
	ctx    context.Context // cancelled by Server.Close
	cancel context.CancelFunc

	mu    sync.Mutex
	byID  map[string]*Operation
	order []string // ids, oldest first
	wg    sync.WaitGroup
}

func newOperations() *operations {
	ctx, cancel := context.WithCancel(context.Background())
	return &operations{ctx: ctx, cancel: cancel, byID: map[string]*Operation{}}
}

// wantsAsync reports whether r asks to be answered before its operation
// ends.
func wantsAsync(r *http.Request) bool {
	for _, v := range r.Header.Values("Prefer") {
		if bytes.Contains(bytes.ToLower([]byte(v)), []byte("respond-async")) {
			return true
		}
	}
	return false
}

// start runs f on a copy of r (its body read in memory, its context the
// operation's) past the request, and returns the operation's state.
func (o *operations) start(r *http.Request, route string, f func(*http.Request) (any, error)) (Operation, error) {
	body, err := io.ReadAll(r.Body) // bounded by maxAdminBody
	if err != nil {
		return Operation{}, meta.BadRequest(err)
	}
	var idb [12]byte
	_, _ = rand.Read(idb[:])
	op := &Operation{ID: hex.EncodeToString(idb[:]), Route: route, State: "running", Started: time.Now().UTC()}
	op.StatusURL = operationsPath + op.ID
	o.mu.Lock()
	if len(o.order) >= maxOperations && !o.forgetOldestEndedLocked() {
		o.mu.Unlock()
		return Operation{}, fmt.Errorf("%w: %d operations already running", meta.ErrServiceNotReady, maxOperations)
	}
	o.byID[op.ID] = op
	o.order = append(o.order, op.ID)
	snap := *op
	o.mu.Unlock()

	ctx, cancel := context.WithTimeout(o.ctx, asyncOpTimeout)
	r2 := r.Clone(ctx)
	r2.Body = io.NopCloser(bytes.NewReader(body))
	o.wg.Add(1)
	go func() {
		defer o.wg.Done()
		defer cancel()
		v, err := f(r2)
		// Marshal now, so GET never races the handler's value.
		// A failed operation keeps the result its handler gave with the
		// error (a region-wide switchover's: what moved and what not).
		var res any
		if v != nil {
			if b, merr := json.Marshal(v); merr == nil {
				res = json.RawMessage(b)
			} else if err == nil {
				err = merr
			}
		}
		now := time.Now().UTC()
		o.mu.Lock()
		op.Finished = &now
		if err != nil {
			op.State, op.Error, op.Result = "failed", err.Error(), res
		} else {
			op.State, op.Result = "succeeded", res
		}
		o.mu.Unlock()
	}()
	return snap, nil
}

// forgetOldestEndedLocked drops the oldest operation that ended; false
// if all are running.
func (o *operations) forgetOldestEndedLocked() bool {
	for i, id := range o.order {
		if o.byID[id].Finished != nil {
			delete(o.byID, id)
			o.order = append(o.order[:i], o.order[i+1:]...)
			return true
		}
	}
	return false
}

// get returns an operation's state.
func (o *operations) get(id string) (Operation, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	op, ok := o.byID[id]
	if !ok {
		return Operation{}, fmt.Errorf("%w: no operation %q (ended ones are forgotten after %d more)", meta.ErrNotFound, id, maxOperations)
	}
	return *op, nil
}

// close cancels the running operations and waits for them.
func (o *operations) close() {
	o.cancel()
	o.wg.Wait()
}

// writeAccepted answers 202 with the operation's Location.
func writeAccepted(w http.ResponseWriter, op Operation) {
	w.Header().Set("Location", op.StatusURL)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusAccepted)
	json.NewEncoder(w).Encode(op)
}
