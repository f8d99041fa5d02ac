package codec

import (
	"google.golang.org/protobuf/proto"

	pb "github.com/meridian-mq/meridian/proto/pulsarpb"
)

// Builders for the commands a broker sends. Each returns a complete
// BaseCommand (type and matching body) ready for AppendCommand, or for
// AppendPayloadCommand in the case of Message. Optional arguments left at
// their zero value ("" or nil) are omitted from the wire.

func base(t pb.BaseCommand_Type) *pb.BaseCommand { return &pb.BaseCommand{Type: t.Enum()} }

func optString(s string) *string {
	if s == "" {
		return nil
	}
	return proto.String(s)
}

// MessageID builds a MessageIdData for an entry (no partition, no batch
// index). Ids 0 are written: proto2 keeps presence.
func MessageID(ledgerID, entryID uint64) *pb.MessageIdData {
	return &pb.MessageIdData{LedgerId: proto.Uint64(ledgerID), EntryId: proto.Uint64(entryID)}
}

// Connected answers CONNECT. maxMessageSize > 0 announces the broker's
// message limit (the client then sizes batches and chunks to it); 0 leaves
// the client's default of DefaultMaxMessageSize. brokerEntryMetadata
// announces that MESSAGE frames may carry broker-entry metadata.
func Connected(serverVersion string, protocolVersion, maxMessageSize int32, brokerEntryMetadata bool) *pb.BaseCommand {
	c := base(pb.BaseCommand_CONNECTED)
	c.Connected = &pb.CommandConnected{
		ServerVersion:   proto.String(serverVersion),
		ProtocolVersion: proto.Int32(protocolVersion),
	}
	if maxMessageSize > 0 {
		c.Connected.MaxMessageSize = proto.Int32(maxMessageSize)
	}
	if brokerEntryMetadata {
		c.Connected.FeatureFlags = &pb.FeatureFlags{SupportsBrokerEntryMetadata: proto.Bool(true)}
	}
	return c
}

// Success answers a request that has no other reply (SUBSCRIBE,
// UNSUBSCRIBE, SEEK, CLOSE_PRODUCER, CLOSE_CONSUMER).
func Success(requestID uint64) *pb.BaseCommand {
	c := base(pb.BaseCommand_SUCCESS)
	c.Success = &pb.CommandSuccess{RequestId: proto.Uint64(requestID)}
	return c
}

// Error fails the request requestID with code and message (see errors.go
// for how the client reacts; message must not contain another code's name).
func Error(requestID uint64, code pb.ServerError, message string) *pb.BaseCommand {
	c := base(pb.BaseCommand_ERROR)
	c.Error = &pb.CommandError{RequestId: proto.Uint64(requestID), Error: code.Enum(), Message: proto.String(message)}
	return c
}

// ErrorFor fails the request requestID with err, coded by CodeOf(err).
func ErrorFor(requestID uint64, err error) *pb.BaseCommand {
	return Error(requestID, CodeOf(err), err.Error())
}

// PartitionedMetadata answers PARTITIONED_METADATA: 0 partitions means a
// non-partitioned topic. Every broker must answer the same count.
func PartitionedMetadata(requestID uint64, partitions uint32) *pb.BaseCommand {
	c := base(pb.BaseCommand_PARTITIONED_METADATA_RESPONSE)
	c.PartitionMetadataResponse = &pb.CommandPartitionedTopicMetadataResponse{
		RequestId:  proto.Uint64(requestID),
		Partitions: proto.Uint32(partitions),
		Response:   pb.CommandPartitionedTopicMetadataResponse_Success.Enum(),
	}
	return c
}

// PartitionedMetadataFailed fails PARTITIONED_METADATA. ServiceNotReady makes
// the client close the connection.
func PartitionedMetadataFailed(requestID uint64, code pb.ServerError, message string) *pb.BaseCommand {
	c := base(pb.BaseCommand_PARTITIONED_METADATA_RESPONSE)
	c.PartitionMetadataResponse = &pb.CommandPartitionedTopicMetadataResponse{
		RequestId: proto.Uint64(requestID),
		Response:  pb.CommandPartitionedTopicMetadataResponse_Failed.Enum(),
		Error:     code.Enum(),
		Message:   optString(message),
	}
	return c
}

// LookupConnect answers LOOKUP: the topic is served at brokerURL
// ("pulsar://host:port"; brokerURLTLS for TLS clients, may be "").
func LookupConnect(requestID uint64, brokerURL, brokerURLTLS string, authoritative bool) *pb.BaseCommand {
	return lookup(requestID, pb.CommandLookupTopicResponse_Connect, brokerURL, brokerURLTLS, authoritative)
}

// LookupRedirect answers LOOKUP: ask brokerURL instead. The client copies
// authoritative into its next LOOKUP and follows at most 20 redirects.
func LookupRedirect(requestID uint64, brokerURL, brokerURLTLS string, authoritative bool) *pb.BaseCommand {
	return lookup(requestID, pb.CommandLookupTopicResponse_Redirect, brokerURL, brokerURLTLS, authoritative)
}

func lookup(requestID uint64, t pb.CommandLookupTopicResponse_LookupType, url, urlTLS string, authoritative bool) *pb.BaseCommand {
	c := base(pb.BaseCommand_LOOKUP_RESPONSE)
	c.LookupTopicResponse = &pb.CommandLookupTopicResponse{
		RequestId:           proto.Uint64(requestID),
		Response:            t.Enum(),
		BrokerServiceUrl:    proto.String(url),
		BrokerServiceUrlTls: optString(urlTLS),
		Authoritative:       proto.Bool(authoritative),
	}
	return c
}

// LookupFailed fails LOOKUP; the client sees the code's name as the error
// text. ServiceNotReady makes it close the connection.
func LookupFailed(requestID uint64, code pb.ServerError, message string) *pb.BaseCommand {
	c := base(pb.BaseCommand_LOOKUP_RESPONSE)
	c.LookupTopicResponse = &pb.CommandLookupTopicResponse{
		RequestId: proto.Uint64(requestID),
		Response:  pb.CommandLookupTopicResponse_Failed.Enum(),
		Error:     code.Enum(),
		Message:   optString(message),
	}
	return c
}

// ProducerSuccess answers PRODUCER. producerName is required (the broker
// picks a unique one when the client sent none); the client numbers its
// first message lastSequenceID+1 (-1 for a new producer); schemaVersion may
// be nil.
func ProducerSuccess(requestID uint64, producerName string, lastSequenceID int64, schemaVersion []byte) *pb.BaseCommand {
	c := base(pb.BaseCommand_PRODUCER_SUCCESS)
	c.ProducerSuccess = &pb.CommandProducerSuccess{
		RequestId:      proto.Uint64(requestID),
		ProducerName:   proto.String(producerName),
		LastSequenceId: proto.Int64(lastSequenceID),
		SchemaVersion:  schemaVersion,
		ProducerReady:  proto.Bool(true),
	}
	return c
}

// SendReceipt confirms the SEND of producerID with sequenceID (the first
// of a batch) and highestSequenceID (its last; equal for one message),
// stored as entry (ledgerID, entryID). Receipts must follow send order.
func SendReceipt(producerID, sequenceID, highestSequenceID, ledgerID, entryID uint64) *pb.BaseCommand {
	c := base(pb.BaseCommand_SEND_RECEIPT)
	c.SendReceipt = &pb.CommandSendReceipt{
		ProducerId:        proto.Uint64(producerID),
		SequenceId:        proto.Uint64(sequenceID),
		HighestSequenceId: proto.Uint64(highestSequenceID),
		MessageId:         MessageID(ledgerID, entryID),
	}
	return c
}

// SendError rejects a SEND. Only NotAllowedError and TopicTerminatedError
// keep the connection; any other code makes the client close it and
// re-send every pending message.
func SendError(producerID, sequenceID uint64, code pb.ServerError, message string) *pb.BaseCommand {
	c := base(pb.BaseCommand_SEND_ERROR)
	c.SendError = &pb.CommandSendError{
		ProducerId: proto.Uint64(producerID),
		SequenceId: proto.Uint64(sequenceID),
		Error:      code.Enum(),
		Message:    proto.String(message),
	}
	return c
}

// Message is the command of a MESSAGE frame delivering entry id to
// consumerID; frame it with AppendPayloadCommand and the stored payload.
// ackSet, if non-nil, marks with a 1 bit each batch index still to deliver.
func Message(consumerID uint64, id *pb.MessageIdData, redeliveryCount uint32, ackSet []int64) *pb.BaseCommand {
	c := base(pb.BaseCommand_MESSAGE)
	c.Message = &pb.CommandMessage{
		ConsumerId:      proto.Uint64(consumerID),
		MessageId:       id,
		RedeliveryCount: proto.Uint32(redeliveryCount),
		AckSet:          ackSet,
	}
	return c
}

// ActiveConsumerChange tells a Failover-subscription consumer whether it
// is the active one.
func ActiveConsumerChange(consumerID uint64, active bool) *pb.BaseCommand {
	c := base(pb.BaseCommand_ACTIVE_CONSUMER_CHANGE)
	c.ActiveConsumerChange = &pb.CommandActiveConsumerChange{ConsumerId: proto.Uint64(consumerID), IsActive: proto.Bool(active)}
	return c
}

// AckResponse confirms an ACK that carried requestID.
func AckResponse(consumerID, requestID uint64) *pb.BaseCommand {
	c := base(pb.BaseCommand_ACK_RESPONSE)
	c.AckResponse = &pb.CommandAckResponse{ConsumerId: proto.Uint64(consumerID), RequestId: proto.Uint64(requestID)}
	return c
}

// AckResponseError fails an ACK that carried requestID. The client treats
// an ACK_RESPONSE with a non-empty message as failed, so message must not
// be empty.
func AckResponseError(consumerID, requestID uint64, code pb.ServerError, message string) *pb.BaseCommand {
	c := AckResponse(consumerID, requestID)
	c.AckResponse.Error = code.Enum()
	c.AckResponse.Message = proto.String(message)
	return c
}

// CloseProducer tells the client to drop and re-create producerID. With
// assignedURL (and assignedURLTLS) it reconnects there once without a
// lookup; with "" it looks the topic up again. The request id is the
// broker's own (the client does not answer).
func CloseProducer(producerID, requestID uint64, assignedURL, assignedURLTLS string) *pb.BaseCommand {
	c := base(pb.BaseCommand_CLOSE_PRODUCER)
	c.CloseProducer = &pb.CommandCloseProducer{
		ProducerId:                  proto.Uint64(producerID),
		RequestId:                   proto.Uint64(requestID),
		AssignedBrokerServiceUrl:    optString(assignedURL),
		AssignedBrokerServiceUrlTls: optString(assignedURLTLS),
	}
	return c
}

// CloseConsumer is CloseProducer for a consumer. A broker must send it
// after a successful SEEK: the client pauses delivery until it resubscribes.
func CloseConsumer(consumerID, requestID uint64, assignedURL, assignedURLTLS string) *pb.BaseCommand {
	c := base(pb.BaseCommand_CLOSE_CONSUMER)
	c.CloseConsumer = &pb.CommandCloseConsumer{
		ConsumerId:                  proto.Uint64(consumerID),
		RequestId:                   proto.Uint64(requestID),
		AssignedBrokerServiceUrl:    optString(assignedURL),
		AssignedBrokerServiceUrlTls: optString(assignedURLTLS),
	}
	return c
}

// TopicMigrated moves a producer or consumer to another cluster's broker.
func TopicMigrated(resourceID uint64, kind pb.CommandTopicMigrated_ResourceType, brokerURL, brokerURLTLS string) *pb.BaseCommand {
	c := base(pb.BaseCommand_TOPIC_MIGRATED)
	c.TopicMigrated = &pb.CommandTopicMigrated{
		ResourceId:          proto.Uint64(resourceID),
		ResourceType:        kind.Enum(),
		BrokerServiceUrl:    optString(brokerURL),
		BrokerServiceUrlTls: optString(brokerURLTLS),
	}
	return c
}

// LastMessageID answers GET_LAST_MESSAGE_ID. For an empty topic pass an
// entry id of math.MaxUint64 (-1); markDelete may be nil.
func LastMessageID(requestID uint64, last, markDelete *pb.MessageIdData) *pb.BaseCommand {
	c := base(pb.BaseCommand_GET_LAST_MESSAGE_ID_RESPONSE)
	c.GetLastMessageIdResponse = &pb.CommandGetLastMessageIdResponse{
		RequestId:                  proto.Uint64(requestID),
		LastMessageId:              last,
		ConsumerMarkDeletePosition: markDelete,
	}
	return c
}

// TopicsOfNamespace answers GET_TOPICS_OF_NAMESPACE. filtered says the
// broker already applied the request's pattern; hash may be "".
func TopicsOfNamespace(requestID uint64, topics []string, filtered bool, hash string) *pb.BaseCommand {
	c := base(pb.BaseCommand_GET_TOPICS_OF_NAMESPACE_RESPONSE)
	c.GetTopicsOfNamespaceResponse = &pb.CommandGetTopicsOfNamespaceResponse{
		RequestId:  proto.Uint64(requestID),
		Topics:     topics,
		Filtered:   proto.Bool(filtered),
		TopicsHash: optString(hash),
	}
	return c
}

// GetSchemaResponse answers GET_SCHEMA with a schema and its version.
func GetSchemaResponse(requestID uint64, schema *pb.Schema, version []byte) *pb.BaseCommand {
	c := base(pb.BaseCommand_GET_SCHEMA_RESPONSE)
	c.GetSchemaResponse = &pb.CommandGetSchemaResponse{RequestId: proto.Uint64(requestID), Schema: schema, SchemaVersion: version}
	return c
}

// GetSchemaError fails GET_SCHEMA.
func GetSchemaError(requestID uint64, code pb.ServerError, message string) *pb.BaseCommand {
	c := base(pb.BaseCommand_GET_SCHEMA_RESPONSE)
	c.GetSchemaResponse = &pb.CommandGetSchemaResponse{RequestId: proto.Uint64(requestID), ErrorCode: code.Enum(), ErrorMessage: proto.String(message)}
	return c
}

// GetOrCreateSchemaResponse answers GET_OR_CREATE_SCHEMA with the version.
func GetOrCreateSchemaResponse(requestID uint64, version []byte) *pb.BaseCommand {
	c := base(pb.BaseCommand_GET_OR_CREATE_SCHEMA_RESPONSE)
	c.GetOrCreateSchemaResponse = &pb.CommandGetOrCreateSchemaResponse{RequestId: proto.Uint64(requestID), SchemaVersion: version}
	return c
}

// GetOrCreateSchemaError fails GET_OR_CREATE_SCHEMA.
func GetOrCreateSchemaError(requestID uint64, code pb.ServerError, message string) *pb.BaseCommand {
	c := base(pb.BaseCommand_GET_OR_CREATE_SCHEMA_RESPONSE)
	c.GetOrCreateSchemaResponse = &pb.CommandGetOrCreateSchemaResponse{RequestId: proto.Uint64(requestID), ErrorCode: code.Enum(), ErrorMessage: proto.String(message)}
	return c
}

// Ping asks the client to prove it is alive; it answers PONG. The client
// closes a connection that sent nothing for 60 s.
func Ping() *pb.BaseCommand {
	c := base(pb.BaseCommand_PING)
	c.Ping = &pb.CommandPing{}
	return c
}

// Pong answers the client's PING.
func Pong() *pb.BaseCommand {
	c := base(pb.BaseCommand_PONG)
	c.Pong = &pb.CommandPong{}
	return c
}
