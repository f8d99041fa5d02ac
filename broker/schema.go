package broker

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/meridian-mq/meridian/broker/meta"
	pb "github.com/meridian-mq/meridian/proto/pulsarpb"
	"google.golang.org/protobuf/proto"
)

func (t *Topic) schemaFor(ctx context.Context, s *pb.Schema) ([]byte, error) {
	if s.GetType() == pb.Schema_None && len(s.SchemaData) == 0 {
		return nil, nil
	}
	v, err := t.b.meta.GetOrCreateSchema(ctx, t.name, s)
	if err != nil {
		return nil, err
	}
	return meta.VersionBytes(v), nil
}

// checkConsumerSchema is Pulsar's check of the schema a SUBSCRIBE
// carries (AbstractTopic.addSchemaIfIdleOrCheckCompatible), run before
// the consumer is added:
//
//  1. no schema, or Bytes (what pulsar-client-go sends for none; its
//     AUTO_CONSUME type is not a value of the protocol's enum, so it
//     arrives as this too): nothing is checked;
//  2. the topic has a schema: the consumer's must read what the latest
//     version wrote (meta.CheckConsumerSchema, BACKWARD); its latest
//     version is a deletion: refused, there is none to check against;
//  3. the topic has none and is idle (no producer, no consumer, nothing
//     stored): the consumer's schema is registered as the topic's first
//     version, as a producer's would be (Pulsar's isAllowAutoUpdateSchema
//     is true, and Meridian has no setting to turn it off);
//  4. the topic has none but is not idle: refused, as Pulsar refuses a
//     schema on a topic already used without one ("Failed to add schema
//     to an active topic with empty(BYTES) schema").
//
// A refusal wraps meta.ErrIncompatibleSchema: the client gets
// IncompatibleSchema. Non-persistent topics keep no schemas and are not
// checked (docs/broker.md).
func (t *Topic) checkConsumerSchema(ctx context.Context, s *pb.Schema) error {
	if s == nil || (s.GetType() == pb.Schema_None && len(s.SchemaData) == 0) {
		return nil
	}
	err := t.b.meta.CheckConsumerSchema(ctx, t.name, s)
	if errors.Is(err, meta.ErrNoSchema) {
		t.mu.Lock()
		producers := len(t.producers)
		t.mu.Unlock()
		if consumers, stored := t.consumers.Load(), t.ml.TotalSizeBytes(); producers > 0 || consumers > 0 || stored > 0 {
			return fmt.Errorf("%w: %s has no schema but is in use (%d producers, %d consumers, %d bytes stored): a consumer with a %s schema cannot subscribe",
				meta.ErrIncompatibleSchema, t.name, producers, consumers, stored, s.GetType())
		}
		_, err = t.b.meta.GetOrCreateSchema(ctx, t.name, s)
	}
	if err != nil && !errors.Is(err, meta.ErrIncompatibleSchema) {
		return fmt.Errorf("%w: the schema of %s: %v", meta.ErrServiceNotReady, t.name, err)
	}
	return err
}

func schemaError(c *conn, cmdType pb.BaseCommand_Type, reqID uint64, code pb.ServerError, msg string) {
	switch cmdType {
	case pb.BaseCommand_GET_SCHEMA_RESPONSE:
		c.send(&pb.BaseCommand{Type: cmdType.Enum(), GetSchemaResponse: &pb.CommandGetSchemaResponse{
			RequestId: proto.Uint64(reqID), ErrorCode: code.Enum(), ErrorMessage: proto.String(msg)}})
	default:
		c.send(&pb.BaseCommand{Type: cmdType.Enum(), GetOrCreateSchemaResponse: &pb.CommandGetOrCreateSchemaResponse{
			RequestId: proto.Uint64(reqID), ErrorCode: code.Enum(), ErrorMessage: proto.String(msg)}})
	}
}

func (c *conn) handleGetSchema(m *pb.CommandGetSchema) {
	ctx, cancel := c.ctx()
	defer cancel()
	tn, err := meta.ParseTopic(m.GetTopic())
	if err != nil {
		schemaError(c, pb.BaseCommand_GET_SCHEMA_RESPONSE, m.GetRequestId(), pb.ServerError_TopicNotFound, err.Error())
		return
	}
	if !tn.Persistent() {
		schemaError(c, pb.BaseCommand_GET_SCHEMA_RESPONSE, m.GetRequestId(), pb.ServerError_NotAllowedError, tn.String()+": non-persistent topics keep no schemas")
		return
	}
	all, err := c.b.meta.Schemas(ctx, tn)
	if err != nil {
		schemaError(c, pb.BaseCommand_GET_SCHEMA_RESPONSE, m.GetRequestId(), pb.ServerError_MetadataError, err.Error())
		return
	}
	v := int64(len(all) - 1)
	if len(m.SchemaVersion) == 8 {
		v = int64(binary.BigEndian.Uint64(m.SchemaVersion))
	}
	if v < 0 || v >= int64(len(all)) || all[v].Deleted {
		schemaError(c, pb.BaseCommand_GET_SCHEMA_RESPONSE, m.GetRequestId(), pb.ServerError_TopicNotFound, "schema not found")
		return
	}
	s := all[v]
	typ := pb.Schema_Type_value[s.Type]
	var props []*pb.KeyValue
	for k, val := range s.Properties {
		props = append(props, &pb.KeyValue{Key: proto.String(k), Value: proto.String(val)})
	}
	c.send(&pb.BaseCommand{Type: pb.BaseCommand_GET_SCHEMA_RESPONSE.Enum(), GetSchemaResponse: &pb.CommandGetSchemaResponse{
		RequestId:     proto.Uint64(m.GetRequestId()),
		Schema:        &pb.Schema{Name: proto.String(tn.Local), SchemaData: s.Data, Type: pb.Schema_Type(typ).Enum(), Properties: props},
		SchemaVersion: meta.VersionBytes(v),
	}})
}

func (c *conn) handleGetOrCreateSchema(m *pb.CommandGetOrCreateSchema) {
	ctx, cancel := c.ctx()
	defer cancel()
	tn, err := meta.ParseTopic(m.GetTopic())
	if err != nil {
		schemaError(c, pb.BaseCommand_GET_OR_CREATE_SCHEMA_RESPONSE, m.GetRequestId(), pb.ServerError_TopicNotFound, err.Error())
		return
	}
	if !tn.Persistent() {
		schemaError(c, pb.BaseCommand_GET_OR_CREATE_SCHEMA_RESPONSE, m.GetRequestId(), pb.ServerError_NotAllowedError, tn.String()+": non-persistent topics keep no schemas")
		return
	}
	v, err := c.b.meta.GetOrCreateSchema(ctx, tn, m.GetSchema())
	if err != nil {
		code := pb.ServerError_MetadataError
		if errors.Is(err, meta.ErrIncompatibleSchema) {
			code = pb.ServerError_IncompatibleSchema
		}
		schemaError(c, pb.BaseCommand_GET_OR_CREATE_SCHEMA_RESPONSE, m.GetRequestId(), code, err.Error())
		return
	}
	c.send(&pb.BaseCommand{Type: pb.BaseCommand_GET_OR_CREATE_SCHEMA_RESPONSE.Enum(), GetOrCreateSchemaResponse: &pb.CommandGetOrCreateSchemaResponse{
		RequestId: proto.Uint64(m.GetRequestId()), SchemaVersion: meta.VersionBytes(v)}})
}
