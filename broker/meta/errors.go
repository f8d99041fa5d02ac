package meta

import (
	"errors"
	"fmt"
	"net/http"
)

// Errors a request can end with, shared by every room of the broker. The
// protocol maps each to one ServerError (the broker's serverError), the
// admin API to an HTTP status (writeAdmin); the comment says how the Go
// client reacts.
var (
	// ErrTopicNotFound → TopicNotFound: the client gives up for good. Only
	// for names that are wrong (namespace does not exist, bad name), never
	// for a standby or moving topic.
	ErrTopicNotFound = errors.New("topic not found")
	// ErrProducerBusy → ProducerBusy: an exclusive producer exists, or the
	// topic has MaxProducersPerTopic (as Pulsar answers its own limit). A
	// new Go producer fails with it; a reconnecting one retries with
	// back-off.
	ErrProducerBusy = errors.New("producer busy")
	// ErrProducerFenced → ProducerFenced: an exclusive producer holds the
	// topic, or one took it over (ExclusiveWithFencing) and the topic
	// epoch moved past the producer's. The Go client fails a new producer
	// and closes a reconnecting one for good. Never a standby region's
	// answer (it redirects).
	ErrProducerFenced = errors.New("producer fenced")
	// ErrConsumerBusy → ConsumerBusy: an exclusive subscription has a
	// consumer, or MaxConsumersPerTopic/-Subscription is reached (as
	// Pulsar); a new Go consumer fails, a reconnecting one retries.
	ErrConsumerBusy = errors.New("consumer busy")
	// ErrServiceNotReady → ServiceNotReady: retried (the Go client also
	// closes the connection on it). Also the answer past
	// MaxPendingRequestsPerConnection: closing sheds the client's load and
	// its retry starts over with nothing in progress.
	ErrServiceNotReady = errors.New("service not ready")
	// ErrTopicFenced → ServiceNotReady: the topic moved to another broker
	// or is reloading; the client retries and looks it up again.
	ErrTopicFenced = errors.New("topic fenced")
	// ErrNotAllowed → NotAllowed: the client unregisters the producer.
	ErrNotAllowed = errors.New("not allowed")
	// ErrPersistence → PersistenceError: the client resends.
	ErrPersistence = errors.New("persistence error")
)

// ErrQuotaHold and ErrQuotaException are the two producer-side quota
// answers.
var (
	ErrQuotaHold      = fmt.Errorf("backlog quota exceeded: producer_request_hold")
	ErrQuotaException = fmt.Errorf("backlog quota exceeded: producer_exception")
)

// Sentinel errors of security, mapped to AuthenticationError /
// AuthorizationError on the protocol and 401 / 403 on the admin API.
var (
	ErrAuthentication = errors.New("authentication failed")
	ErrAuthorization  = errors.New("not authorized")
)

// StatusError is an error that carries the HTTP status the admin API
// answers it with (400 for a request that cannot work, 409 for a conflict
// with the current state, ...); on the protocol it maps as Err does.
type StatusError struct {
	Status int
	Err    error
}

func (e StatusError) Error() string { return e.Err.Error() }

func (e StatusError) Unwrap() error { return e.Err }

// NotOwnerError is the error of a topic operation on a broker that does
// not own the topic's bundle (Err wraps ErrTopicFenced): the admin API
// answers it with a 307 to OwnerAdminURL, the owner's admin API, as
// Pulsar redirects a topic's admin call to its owner — or to the owner's
// web service URL in the caller's listener, from OwnerHTTPListeners (nil:
// none).
type NotOwnerError struct {
	OwnerAdminURL      string
	OwnerHTTPListeners HTTPListeners
	Err                error
}

func (e NotOwnerError) Error() string { return e.Err.Error() }

func (e NotOwnerError) Unwrap() error { return e.Err }

// BadRequest marks err as the caller's mistake: HTTP 400. nil stays nil.
func BadRequest(err error) error {
	if err == nil {
		return nil
	}
	return StatusError{Status: http.StatusBadRequest, Err: err}
}
