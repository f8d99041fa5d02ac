package broker

import (
	"errors"
	"fmt"

	"github.com/meridian-mq/meridian/bookie/ledger"
	"github.com/meridian-mq/meridian/broker/mledger"
	"github.com/meridian-mq/meridian/cluster"
	pb "github.com/meridian-mq/meridian/proto/pulsarpb"
)

// Errors the protocol answers with. Each maps to one ServerError in
// serverError; the comment says how the Go client reacts.
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

// serverError maps an error to the code sent to the client.
func serverError(err error) pb.ServerError {
	switch {
	case errors.Is(err, ErrAuthorization):
		return pb.ServerError_AuthorizationError
	case errors.Is(err, ErrAuthentication):
		return pb.ServerError_AuthenticationError
	case errors.Is(err, ErrTopicNotFound), errors.Is(err, ErrInvalidName), errors.Is(err, ErrNotFound):
		return pb.ServerError_TopicNotFound
	case errors.Is(err, ErrQuotaHold):
		return pb.ServerError_ProducerBlockedQuotaExceededError
	case errors.Is(err, ErrQuotaException):
		return pb.ServerError_ProducerBlockedQuotaExceededException
	case errors.Is(err, ErrProducerBusy):
		return pb.ServerError_ProducerBusy
	case errors.Is(err, ErrConsumerBusy):
		return pb.ServerError_ConsumerBusy
	case errors.Is(err, ErrNotAllowed):
		return pb.ServerError_NotAllowedError
	case errors.Is(err, ErrTopicFenced), errors.Is(err, ErrServiceNotReady),
		errors.Is(err, ledger.ErrFenced), errors.Is(err, mledger.ErrFenced):
		return pb.ServerError_ServiceNotReady
	case errors.Is(err, ErrPersistence), errors.Is(err, ledger.ErrNotEnoughBookies):
		return pb.ServerError_PersistenceError
	default:
		return pb.ServerError_UnknownError
	}
}

// namespaceErr is the answer when reading namespace ns's policies failed
// with err. Only a namespace that is not there is TopicNotFound (on which
// the Go client's producers and consumers stop reconnecting for good); a
// metadata store that is slow or unreachable — a paused global-store
// member during a silent outage — is ServiceNotReady, retried.
func namespaceErr(ns string, err error) error {
	if errors.Is(err, ErrNotFound) || errors.Is(err, cluster.ErrNotFound) {
		return fmt.Errorf("%w: namespace %s does not exist", ErrTopicNotFound, ns)
	}
	return fmt.Errorf("%w: reading namespace %s: %v", ErrServiceNotReady, ns, err)
}
