package pulsarpb_test

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"

	pb "github.com/meridian-mq/meridian/proto/pulsarpb"
)

// undeclared lists the client's fields we leave out on purpose: the bodies
// of transaction and topic-watcher commands. Their bytes still survive a
// decode as unknown fields.
var undeclared = map[string]bool{}

func init() {
	for n := 50; n <= 67; n++ {
		undeclared[fmt.Sprintf("BaseCommand#%d", n)] = true
	}
}

// relName is a descriptor's full name without its package.
func relName(d protoreflect.Descriptor) string {
	return strings.TrimPrefix(string(d.FullName()), string(d.ParentFile().Package())+".")
}

func findClient(client protoreflect.FileDescriptor, rel string) protoreflect.Descriptor {
	return findByRel(client.Messages(), client.Enums(), rel)
}

func findByRel(ms protoreflect.MessageDescriptors, es protoreflect.EnumDescriptors, rel string) protoreflect.Descriptor {
	head, rest, nested := strings.Cut(rel, ".")
	if !nested {
		if m := ms.ByName(protoreflect.Name(head)); m != nil {
			return m
		}
		if e := es.ByName(protoreflect.Name(head)); e != nil {
			return e
		}
		return nil
	}
	m := ms.ByName(protoreflect.Name(head))
	if m == nil {
		return nil
	}
	return findByRel(m.Messages(), m.Enums(), rest)
}

// defaultString renders a field's declared default the way it is written
// in a .proto file ("" when there is none).
func defaultString(f protoreflect.FieldDescriptor) string {
	if !f.HasDefault() {
		return ""
	}
	if f.Kind() == protoreflect.EnumKind {
		return string(f.DefaultEnumValue().Name())
	}
	return fmt.Sprint(f.Default().Interface())
}

func typeString(f protoreflect.FieldDescriptor) string {
	switch f.Kind() {
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return "message " + relName(f.Message())
	case protoreflect.EnumKind:
		return "enum " + relName(f.Enum())
	}
	return f.Kind().String()
}

// TestSchemaMatchesClient checks that every message, field and enum we
// declare has the same field number, type, label and default (and the same
// enum numbers) as pulsar-client-go's own PulsarApi.proto, and that we left
// out none of a declared message's fields or enum's values except those in
// undeclared: these are facts of the wire format. A missing enum value
// would decode here as an unnamed number (protobuf-go treats enums as open)
// but makes Java and C++ peers drop the field, and a required one with it.
func TestSchemaMatchesClient(t *testing.T) {
	client := loadClientSchema(t)
	ours := pb.File_pulsarpb_pulsar_proto

	var checkMessages func(protoreflect.MessageDescriptors)
	var checkEnums func(protoreflect.EnumDescriptors)
	checkEnums = func(es protoreflect.EnumDescriptors) {
		for i := 0; i < es.Len(); i++ {
			e := es.Get(i)
			ce, ok := findClient(client, relName(e)).(protoreflect.EnumDescriptor)
			if !ok {
				t.Errorf("enum %s: not in the client's proto", relName(e))
				continue
			}
			for j := 0; j < ce.Values().Len(); j++ {
				cv := ce.Values().Get(j)
				v := e.Values().ByName(cv.Name())
				switch {
				case v == nil:
					t.Errorf("enum %s: value %s = %d missing", relName(e), cv.Name(), cv.Number())
				case v.Number() != cv.Number():
					t.Errorf("enum %s: %s = %d, client has %d", relName(e), v.Name(), v.Number(), cv.Number())
				}
			}
			if e.Values().Len() != ce.Values().Len() {
				t.Errorf("enum %s: %d values, client has %d", relName(e), e.Values().Len(), ce.Values().Len())
			}
		}
	}
	checkMessages = func(ms protoreflect.MessageDescriptors) {
		for i := 0; i < ms.Len(); i++ {
			m := ms.Get(i)
			name := relName(m)
			cm, ok := findClient(client, name).(protoreflect.MessageDescriptor)
			if !ok {
				t.Errorf("message %s: not in the client's proto", name)
				continue
			}
			for j := 0; j < m.Fields().Len(); j++ {
				f := m.Fields().Get(j)
				cf := cm.Fields().ByName(f.Name())
				if cf == nil {
					t.Errorf("%s.%s: no such field in the client's proto", name, f.Name())
					continue
				}
				if f.Number() != cf.Number() {
					t.Errorf("%s.%s: number %d, client has %d", name, f.Name(), f.Number(), cf.Number())
				}
				if got, want := typeString(f), typeString(cf); got != want {
					t.Errorf("%s.%s: type %s, client has %s", name, f.Name(), got, want)
				}
				if f.Cardinality() != cf.Cardinality() {
					t.Errorf("%s.%s: label %s, client has %s", name, f.Name(), f.Cardinality(), cf.Cardinality())
				}
				if got, want := defaultString(f), defaultString(cf); got != want {
					t.Errorf("%s.%s: default %q, client has %q", name, f.Name(), got, want)
				}
			}
			for j := 0; j < cm.Fields().Len(); j++ {
				cf := cm.Fields().Get(j)
				if m.Fields().ByNumber(cf.Number()) == nil && !undeclared[fmt.Sprintf("%s#%d", name, cf.Number())] {
					t.Errorf("%s: client field %s = %d not declared", name, cf.Name(), cf.Number())
				}
			}
			checkEnums(m.Enums())
			checkMessages(m.Messages())
		}
	}
	checkMessages(ours.Messages())
	checkEnums(ours.Enums())
}

func msgID(ledger, entry uint64) *pb.MessageIdData {
	return &pb.MessageIdData{LedgerId: proto.Uint64(ledger), EntryId: proto.Uint64(entry)}
}

func baseCmd(t pb.BaseCommand_Type) *pb.BaseCommand {
	return &pb.BaseCommand{Type: t.Enum()}
}

// representative returns messages covering what the broker reads and
// writes, with zero values set on purpose (ids 0 must reach the wire).
func representative() []proto.Message {
	kv := []*pb.KeyValue{{Key: proto.String("k"), Value: proto.String("v")}}
	schema := &pb.Schema{Name: proto.String("s"), SchemaData: []byte(`{"type":"string"}`), Type: pb.Schema_Json.Enum(), Properties: kv}
	connect := &pb.CommandConnect{
		ClientVersion:   proto.String("Pulsar-Go-v0.19.0"),
		AuthMethodName:  proto.String(""),
		ProtocolVersion: proto.Int32(20),
		FeatureFlags:    &pb.FeatureFlags{SupportsAuthRefresh: proto.Bool(true), SupportsBrokerEntryMetadata: proto.Bool(true)},
	}
	producer := &pb.CommandProducer{
		Topic: proto.String("persistent://public/default/t"), ProducerId: proto.Uint64(0), RequestId: proto.Uint64(0),
		Metadata: kv, Schema: schema, Epoch: proto.Uint64(0), UserProvidedProducerName: proto.Bool(false),
		ProducerAccessMode: pb.ProducerAccessMode_Shared.Enum(), InitialSubscriptionName: proto.String(""),
	}
	send := &pb.CommandSend{ProducerId: proto.Uint64(0), SequenceId: proto.Uint64(0), NumMessages: proto.Int32(3), HighestSequenceId: proto.Uint64(2)}
	receipt := &pb.CommandSendReceipt{ProducerId: proto.Uint64(0), SequenceId: proto.Uint64(0), MessageId: msgID(1, 0)}
	message := &pb.CommandMessage{ConsumerId: proto.Uint64(0), MessageId: msgID(0, 0), RedeliveryCount: proto.Uint32(0), AckSet: []int64{-1, 5}, ConsumerEpoch: proto.Uint64(0)}
	subscribe := &pb.CommandSubscribe{
		Topic: proto.String("persistent://public/default/t"), Subscription: proto.String("sub"),
		SubType: pb.CommandSubscribe_Key_Shared.Enum(), ConsumerId: proto.Uint64(0), RequestId: proto.Uint64(7),
		ConsumerName: proto.String("c"), Durable: proto.Bool(false),
		StartMessageId: msgID(math.MaxUint64, math.MaxUint64), Metadata: kv, Schema: schema,
		InitialPosition: pb.CommandSubscribe_Earliest.Enum(), ReplicateSubscriptionState: proto.Bool(true),
		ForceTopicCreation: proto.Bool(false),
		KeySharedMeta: &pb.KeySharedMeta{
			KeySharedMode: pb.KeySharedMode_STICKY.Enum(),
			HashRanges:    []*pb.IntRange{{Start: proto.Int32(0), End: proto.Int32(32767)}},
		},
		SubscriptionProperties: kv,
	}
	lookup := &pb.CommandLookupTopicResponse{
		BrokerServiceUrl: proto.String("pulsar://127.0.0.1:6650"), Response: pb.CommandLookupTopicResponse_Connect.Enum(),
		RequestId: proto.Uint64(0), Authoritative: proto.Bool(true), ProxyThroughServiceUrl: proto.Bool(false),
	}
	meta := &pb.MessageMetadata{
		ProducerName: proto.String("p-1"), SequenceId: proto.Uint64(0), PublishTime: proto.Uint64(1700000000000),
		Properties: kv, ReplicatedFrom: proto.String("east"), PartitionKey: proto.String("key"),
		ReplicateTo: []string{"east", "west"}, Compression: pb.CompressionType_ZSTD.Enum(),
		UncompressedSize: proto.Uint32(0), NumMessagesInBatch: proto.Int32(0), EventTime: proto.Uint64(0),
		EncryptionKeys: []*pb.EncryptionKeys{{Key: proto.String("ek"), Value: []byte{1, 2}, Metadata: kv}},
		EncryptionAlgo: proto.String("AES"), EncryptionParam: []byte{3}, SchemaVersion: []byte{0, 0, 0, 1},
		PartitionKeyB64Encoded: proto.Bool(false), OrderingKey: []byte("ok"), DeliverAtTime: proto.Int64(-1),
		MarkerType: proto.Int32(0), TxnidLeastBits: proto.Uint64(0), TxnidMostBits: proto.Uint64(0),
		HighestSequenceId: proto.Uint64(0), NullValue: proto.Bool(false), Uuid: proto.String("u"),
		NumChunksFromMsg: proto.Int32(2), TotalChunkMsgSize: proto.Int32(100), ChunkId: proto.Int32(0),
		NullPartitionKey: proto.Bool(false),
	}
	smm := &pb.SingleMessageMetadata{
		Properties: kv, PartitionKey: proto.String("key"), PayloadSize: proto.Int32(0), CompactedOut: proto.Bool(false),
		EventTime: proto.Uint64(0), PartitionKeyB64Encoded: proto.Bool(false), OrderingKey: []byte{},
		SequenceId: proto.Uint64(0), NullValue: proto.Bool(true), NullPartitionKey: proto.Bool(false),
	}

	cmds := []proto.Message{
		connect, producer, send, receipt, message, subscribe, lookup, meta, smm,
		&pb.BrokerEntryMetadata{BrokerTimestamp: proto.Uint64(0), Index: proto.Uint64(0)},
	}
	withBody := func(typ pb.BaseCommand_Type, set func(*pb.BaseCommand)) *pb.BaseCommand {
		c := baseCmd(typ)
		set(c)
		return c
	}
	cmds = append(cmds,
		withBody(pb.BaseCommand_CONNECT, func(c *pb.BaseCommand) { c.Connect = connect }),
		withBody(pb.BaseCommand_CONNECTED, func(c *pb.BaseCommand) {
			c.Connected = &pb.CommandConnected{ServerVersion: proto.String("meridian"), ProtocolVersion: proto.Int32(20), MaxMessageSize: proto.Int32(5 << 20)}
		}),
		withBody(pb.BaseCommand_PRODUCER, func(c *pb.BaseCommand) { c.Producer = producer }),
		withBody(pb.BaseCommand_PRODUCER_SUCCESS, func(c *pb.BaseCommand) {
			c.ProducerSuccess = &pb.CommandProducerSuccess{RequestId: proto.Uint64(0), ProducerName: proto.String("p-1"), LastSequenceId: proto.Int64(-1), ProducerReady: proto.Bool(true)}
		}),
		withBody(pb.BaseCommand_SEND, func(c *pb.BaseCommand) { c.Send = send }),
		withBody(pb.BaseCommand_SEND_RECEIPT, func(c *pb.BaseCommand) { c.SendReceipt = receipt }),
		withBody(pb.BaseCommand_SEND_ERROR, func(c *pb.BaseCommand) {
			c.SendError = &pb.CommandSendError{ProducerId: proto.Uint64(0), SequenceId: proto.Uint64(0), Error: pb.ServerError_ProducerFenced.Enum(), Message: proto.String("")}
		}),
		withBody(pb.BaseCommand_MESSAGE, func(c *pb.BaseCommand) { c.Message = message }),
		withBody(pb.BaseCommand_SUBSCRIBE, func(c *pb.BaseCommand) { c.Subscribe = subscribe }),
		withBody(pb.BaseCommand_LOOKUP_RESPONSE, func(c *pb.BaseCommand) { c.LookupTopicResponse = lookup }),
		withBody(pb.BaseCommand_PARTITIONED_METADATA_RESPONSE, func(c *pb.BaseCommand) {
			c.PartitionMetadataResponse = &pb.CommandPartitionedTopicMetadataResponse{Partitions: proto.Uint32(0), RequestId: proto.Uint64(0), Response: pb.CommandPartitionedTopicMetadataResponse_Success.Enum()}
		}),
		withBody(pb.BaseCommand_ACK, func(c *pb.BaseCommand) {
			c.Ack = &pb.CommandAck{ConsumerId: proto.Uint64(0), AckType: pb.CommandAck_Cumulative.Enum(), MessageId: []*pb.MessageIdData{msgID(1, 0)},
				ValidationError: pb.CommandAck_ChecksumMismatch.Enum(), Properties: []*pb.KeyLongValue{{Key: proto.String("a"), Value: proto.Uint64(0)}}, RequestId: proto.Uint64(0)}
		}),
		withBody(pb.BaseCommand_ERROR, func(c *pb.BaseCommand) {
			c.Error = &pb.CommandError{RequestId: proto.Uint64(0), Error: pb.ServerError_TopicNotFound.Enum(), Message: proto.String("no topic")}
		}),
		withBody(pb.BaseCommand_GET_LAST_MESSAGE_ID_RESPONSE, func(c *pb.BaseCommand) {
			c.GetLastMessageIdResponse = &pb.CommandGetLastMessageIdResponse{LastMessageId: msgID(0, math.MaxUint64), RequestId: proto.Uint64(0)}
		}),
		withBody(pb.BaseCommand_CLOSE_CONSUMER, func(c *pb.BaseCommand) {
			c.CloseConsumer = &pb.CommandCloseConsumer{ConsumerId: proto.Uint64(0), RequestId: proto.Uint64(0), AssignedBrokerServiceUrl: proto.String("pulsar://b:6650")}
		}),
		withBody(pb.BaseCommand_TOPIC_MIGRATED, func(c *pb.BaseCommand) {
			c.TopicMigrated = &pb.CommandTopicMigrated{ResourceId: proto.Uint64(0), ResourceType: pb.CommandTopicMigrated_Consumer.Enum(), BrokerServiceUrl: proto.String("pulsar://x:6650")}
		}),
		withBody(pb.BaseCommand_PING, func(c *pb.BaseCommand) { c.Ping = &pb.CommandPing{} }),
		withBody(pb.BaseCommand_PONG, func(c *pb.BaseCommand) { c.Pong = &pb.CommandPong{} }),
	)
	return cmds
}

// noUnknown fails if m or any message inside it kept bytes its schema did
// not name: the client's schema must know every field we write.
func noUnknown(t *testing.T, path string, m protoreflect.Message) {
	t.Helper()
	if u := m.GetUnknown(); len(u) > 0 {
		t.Errorf("%s: %d bytes unknown to the client's schema", path, len(u))
	}
	m.Range(func(f protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		if f.Kind() != protoreflect.MessageKind {
			return true
		}
		p := path + "." + string(f.Name())
		if f.IsList() {
			for i := 0; i < v.List().Len(); i++ {
				noUnknown(t, fmt.Sprintf("%s[%d]", p, i), v.List().Get(i).Message())
			}
		} else {
			noUnknown(t, p, v.Message())
		}
		return true
	})
}

// sameFieldsSet checks that the client-schema decode has exactly the fields
// we set, by name, recursively: presence of zero values included.
func sameFieldsSet(t *testing.T, path string, ours, theirs protoreflect.Message) {
	t.Helper()
	ours.Range(func(f protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		cf := theirs.Descriptor().Fields().ByName(f.Name())
		if cf == nil || !theirs.Has(cf) {
			t.Errorf("%s.%s: set by us, absent in the client's decode", path, f.Name())
			return true
		}
		if f.Kind() == protoreflect.MessageKind && !f.IsList() {
			sameFieldsSet(t, path+"."+string(f.Name()), v.Message(), theirs.Get(cf).Message())
		}
		return true
	})
}

// TestWireCompatibleWithClientSchema marshals representative messages with
// our generated types and decodes them with the client's schema (built from
// its .proto text, through dynamicpb), requiring every field to be known and
// present with the same name, zero values included; then goes back the
// other way and compares with proto.Equal.
func TestWireCompatibleWithClientSchema(t *testing.T) {
	client := loadClientSchema(t)
	for _, m := range representative() {
		name := relName(m.ProtoReflect().Descriptor())
		t.Run(name, func(t *testing.T) {
			b, err := proto.Marshal(m)
			if err != nil {
				t.Fatalf("marshal ours: %v", err)
			}
			cd, ok := findClient(client, name).(protoreflect.MessageDescriptor)
			if !ok {
				t.Fatalf("client has no message %s", name)
			}
			dyn := dynamicpb.NewMessage(cd)
			if err := proto.Unmarshal(b, dyn); err != nil { // also checks required fields
				t.Fatalf("client schema rejects our bytes: %v", err)
			}
			noUnknown(t, name, dyn)
			sameFieldsSet(t, name, m.ProtoReflect(), dyn)

			back, err := proto.MarshalOptions{Deterministic: true}.Marshal(dyn)
			if err != nil {
				t.Fatalf("marshal with client schema: %v", err)
			}
			got := m.ProtoReflect().New().Interface()
			if err := proto.Unmarshal(back, got); err != nil {
				t.Fatalf("we reject the client schema's bytes: %v", err)
			}
			if !proto.Equal(got, m) {
				t.Errorf("round trip through the client schema changed the message:\n got %v\nwant %v", got, m)
			}
		})
	}
}

// TestZeroIDsReachTheWire pins the reason this package is proto2: a send
// receipt for entry 0 must carry entryId on the wire, or the client cannot
// decode the required field.
func TestZeroIDsReachTheWire(t *testing.T) {
	b, err := proto.Marshal(msgID(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	if want := []byte{0x08, 0x00, 0x10, 0x00}; string(b) != string(want) {
		t.Fatalf("MessageIdData{0,0} = % x, want % x", b, want)
	}
}
