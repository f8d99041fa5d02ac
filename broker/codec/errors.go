package codec

import (
	"errors"
	"fmt"

	pb "github.com/meridian-mq/meridian/proto/pulsarpb"
)

// Kind classifies a failure the broker reports to a Pulsar client. The
// broker tags its errors with a Kind (see KindError); the table below is the one
// place that turns a Kind into a wire ServerError code.
//
// How pulsar-client-go v0.19.0 reacts depends on where the code arrives:
//   - ERROR for a request: the request fails with the text
//     "server error: <CodeName>: <message>". At producer or consumer
//     creation that error reaches the application; on a reconnect the
//     client string-matches the text (so a message must never quote
//     another code's name) and retries with backoff (100 ms doubling to
//     60 s) unless the table says otherwise.
//   - LOOKUP_RESPONSE / PARTITIONED_METADATA_RESPONSE with response=Failed:
//     the lookup fails with the code's name as text, matched the same way;
//     ServiceNotReady there also makes the client close the connection.
//   - SEND_ERROR: NotAllowedError and TopicTerminatedError unregister the
//     producer from the connection; any other code closes the whole
//     connection, and the producer reconnects and re-sends every pending
//     message with the same sequence ids.
type Kind uint8

const (
	// KindUnknown is any failure without a better kind.
	KindUnknown Kind = iota
	// KindServiceNotReady: this broker cannot serve the topic now (not the
	// owner, still loading, ownership moving, ledger fenced by a new owner).
	KindServiceNotReady
	// KindMetadata: the metadata store (etcd) failed or timed out.
	KindMetadata
	// KindPersistence: writing or reading bookies failed.
	KindPersistence
	// KindAuthentication: credentials missing or invalid.
	KindAuthentication
	// KindAuthorization: authenticated but not allowed.
	KindAuthorization
	// KindTopicNotFound: the topic does not exist and will not be created.
	KindTopicNotFound
	// KindTopicTerminated: the topic accepts no more messages.
	KindTopicTerminated
	// KindProducerFenced: a newer exclusive producer took the topic.
	KindProducerFenced
	// KindProducerBusy: a producer with the same name is connected.
	KindProducerBusy
	// KindConsumerBusy: an exclusive subscription already has a consumer.
	KindConsumerBusy
	// KindSubscriptionNotFound: the named subscription does not exist.
	KindSubscriptionNotFound
	// KindConsumerNotFound: the consumer id is unknown on this connection.
	KindConsumerNotFound
	// KindNotAllowed: the operation is refused by policy.
	KindNotAllowed
	// KindInvalidTopicName: the topic name does not parse.
	KindInvalidTopicName
	// KindIncompatibleSchema: the schema conflicts with the topic's.
	KindIncompatibleSchema
	// KindTooManyRequests: the broker sheds load.
	KindTooManyRequests
	// KindChecksum: a message failed its CRC32C check.
	KindChecksum
	// KindUnsupportedVersion: the client's protocol version lacks a feature
	// the request needs.
	KindUnsupportedVersion
	// KindQuotaExceeded: the topic's backlog quota blocks producers.
	KindQuotaExceeded

	numKinds
)

// kindCodes is the table: one row per Kind, with what the client does.
var kindCodes = [numKinds]pb.ServerError{
	// Retried with backoff.
	KindUnknown: pb.ServerError_UnknownError,
	// Retried; the retry does a fresh lookup. In a LOOKUP or
	// PARTITIONED_METADATA response the client also closes the connection,
	// so use it there only when this broker should be abandoned.
	KindServiceNotReady: pb.ServerError_ServiceNotReady,
	// Retried with backoff.
	KindMetadata: pb.ServerError_MetadataError,
	// Retried with backoff; in SEND_ERROR the connection closes and all
	// pending messages are re-sent.
	KindPersistence: pb.ServerError_PersistenceError,
	// Retried with backoff (the error reaches the application at creation).
	KindAuthentication: pb.ServerError_AuthenticationError,
	// Retried with backoff (the error reaches the application at creation).
	KindAuthorization: pb.ServerError_AuthorizationError,
	// Final: a reconnecting producer closes for good, a reconnecting
	// consumer stops reconnecting. Never use it for "not owned here".
	KindTopicNotFound: pb.ServerError_TopicNotFound,
	// Final: the producer closes; in SEND_ERROR it is unregistered from the
	// connection.
	KindTopicTerminated: pb.ServerError_TopicTerminatedError,
	// Final: the producer closes and fails its pending messages.
	KindProducerFenced: pb.ServerError_ProducerFenced,
	// Retried with backoff (the old producer may still be going away).
	KindProducerBusy: pb.ServerError_ProducerBusy,
	// Retried with backoff.
	KindConsumerBusy: pb.ServerError_ConsumerBusy,
	// Retried with backoff.
	KindSubscriptionNotFound: pb.ServerError_SubscriptionNotFound,
	// Retried with backoff.
	KindConsumerNotFound: pb.ServerError_ConsumerNotFound,
	// In SEND_ERROR the producer is unregistered from the connection;
	// elsewhere retried with backoff.
	KindNotAllowed: pb.ServerError_NotAllowedError,
	// Retried with backoff (pointlessly: prefer rejecting at creation).
	KindInvalidTopicName: pb.ServerError_InvalidTopicName,
	// Retried with backoff.
	KindIncompatibleSchema: pb.ServerError_IncompatibleSchema,
	// Retried with backoff.
	KindTooManyRequests: pb.ServerError_TooManyRequests,
	// In SEND_ERROR the connection closes and the producer re-sends.
	KindChecksum: pb.ServerError_ChecksumError,
	// Retried with backoff.
	KindUnsupportedVersion: pb.ServerError_UnsupportedVersionError,
	// The producer fails its pending messages but keeps reconnecting.
	KindQuotaExceeded: pb.ServerError_ProducerBlockedQuotaExceededException,
}

// Code returns the wire ServerError for k (UnknownError for an out-of-range
// Kind).
func (k Kind) Code() pb.ServerError {
	if k >= numKinds {
		return pb.ServerError_UnknownError
	}
	return kindCodes[k]
}

// String names k by its wire code.
func (k Kind) String() string { return k.Code().String() }

// KindError is a failure tagged with the Kind to report to the client.
// Wrap a cause with it where the kind is known:
//
//	return codec.WithKind(codec.KindServiceNotReady, err)
type KindError struct {
	Kind Kind
	Err  error
}

// WithKind tags err with k (nil stays nil).
func WithKind(k Kind, err error) error {
	if err == nil {
		return nil
	}
	return &KindError{Kind: k, Err: err}
}

func (e *KindError) Error() string {
	if e.Err == nil {
		return e.Kind.String()
	}
	return e.Err.Error()
}

func (e *KindError) Unwrap() error { return e.Err }

// Errorf returns a *KindError of kind k with a formatted cause (%w allowed).
func Errorf(k Kind, format string, args ...any) error {
	return &KindError{Kind: k, Err: fmt.Errorf(format, args...)}
}

// KindOf returns the Kind of the outermost *KindError in err's chain, or
// KindUnknown.
func KindOf(err error) Kind {
	var e *KindError
	if errors.As(err, &e) {
		return e.Kind
	}
	return KindUnknown
}

// CodeOf returns the ServerError to report for err.
func CodeOf(err error) pb.ServerError { return KindOf(err).Code() }
