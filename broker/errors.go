package broker

import (
	"errors"
	"fmt"

	"github.com/meridian-mq/meridian/bookie/ledger"
	"github.com/meridian-mq/meridian/broker/meta"
	"github.com/meridian-mq/meridian/broker/mledger"
	"github.com/meridian-mq/meridian/cluster"
	pb "github.com/meridian-mq/meridian/proto/pulsarpb"
)

// serverError maps an error to the code sent to the client.
func serverError(err error) pb.ServerError {
	switch {
	case errors.Is(err, meta.ErrAuthorization):
		return pb.ServerError_AuthorizationError
	case errors.Is(err, meta.ErrAuthentication):
		return pb.ServerError_AuthenticationError
	case errors.Is(err, meta.ErrTopicNotFound), errors.Is(err, meta.ErrInvalidName), errors.Is(err, meta.ErrNotFound):
		return pb.ServerError_TopicNotFound
	case errors.Is(err, meta.ErrQuotaHold):
		return pb.ServerError_ProducerBlockedQuotaExceededError
	case errors.Is(err, meta.ErrQuotaException):
		return pb.ServerError_ProducerBlockedQuotaExceededException
	case errors.Is(err, meta.ErrProducerBusy):
		return pb.ServerError_ProducerBusy
	case errors.Is(err, meta.ErrProducerFenced):
		return pb.ServerError_ProducerFenced
	case errors.Is(err, meta.ErrConsumerBusy):
		return pb.ServerError_ConsumerBusy
	case errors.Is(err, meta.ErrIncompatibleSchema):
		return pb.ServerError_IncompatibleSchema
	case errors.Is(err, meta.ErrNotAllowed):
		return pb.ServerError_NotAllowedError
	case errors.Is(err, meta.ErrTopicFenced), errors.Is(err, meta.ErrServiceNotReady),
		errors.Is(err, ledger.ErrFenced), errors.Is(err, mledger.ErrFenced):
		return pb.ServerError_ServiceNotReady
	case errors.Is(err, meta.ErrPersistence), errors.Is(err, ledger.ErrNotEnoughBookies):
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
	if errors.Is(err, meta.ErrNotFound) || errors.Is(err, cluster.ErrNotFound) {
		return fmt.Errorf("%w: namespace %s does not exist", meta.ErrTopicNotFound, ns)
	}
	return fmt.Errorf("%w: reading namespace %s: %v", meta.ErrServiceNotReady, ns, err)
}
