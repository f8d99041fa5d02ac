package broker

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/meridian-mq/meridian/cluster"
	pb "github.com/meridian-mq/meridian/proto/pulsarpb"
	"google.golang.org/protobuf/proto"
)

// Schemas are stored per topic (the parent of a partitioned topic) under
// /schemas/TENANT/NS/TOPIC/VERSION (VERSION zero-padded), each a
// storedSchema. Versions count from 0, as Pulsar's; a version on the wire
// is 8 bytes big-endian. They are shared by every region through the
// global store so every region has the same version numbers (they live in
// Config.GlobalStore).
type storedSchema struct {
	Type       string            `json:"type"`
	Data       []byte            `json:"data"`
	Properties map[string]string `json:"properties,omitempty"`
	Deleted    bool              `json:"deleted,omitempty"`
}

// ErrIncompatibleSchema: the new schema fails the compatibility check.
var ErrIncompatibleSchema = errors.New("incompatible schema")

func schemaDir(t TopicName) string {
	p := t.PartitionedParent()
	return "/schemas/" + p.Tenant + "/" + p.Namespace + "/" + p.Local + "/"
}

func versionBytes(v int64) []byte { return binary.BigEndian.AppendUint64(nil, uint64(v)) }

// Schemas returns every stored version of a topic's schema, ascending.
func (b *Broker) Schemas(ctx context.Context, t TopicName) ([]storedSchema, error) {
	kvs, _, err := b.cfg.GlobalStore.List(ctx, schemaDir(t))
	if err != nil {
		return nil, err
	}
	out := make([]storedSchema, 0, len(kvs))
	for _, kv := range kvs {
		var s storedSchema
		if err := json.Unmarshal(kv.Value, &s); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

func schemaTypeName(s *pb.Schema) string { return s.GetType().String() }

// getOrCreateSchema returns the version of an identical stored schema, or
// stores s as a new version after the compatibility check.
func (b *Broker) getOrCreateSchema(ctx context.Context, t TopicName, s *pb.Schema) (int64, error) {
	for {
		all, err := b.Schemas(ctx, t)
		if err != nil {
			return 0, err
		}
		props := map[string]string{}
		for _, kv := range s.Properties {
			props[kv.GetKey()] = kv.GetValue()
		}
		for v := len(all) - 1; v >= 0; v-- {
			if !all[v].Deleted && all[v].Type == schemaTypeName(s) && bytes.Equal(all[v].Data, s.SchemaData) {
				return int64(v), nil
			}
		}
		if len(all) > 0 {
			if err := checkCompatible(all[len(all)-1], s); err != nil {
				return 0, err
			}
		}
		val, _ := json.Marshal(storedSchema{Type: schemaTypeName(s), Data: s.SchemaData, Properties: props})
		v := int64(len(all))
		_, err = b.cfg.GlobalStore.Create(ctx, schemaDir(t)+fmt.Sprintf("%020d", v), val)
		if errors.Is(err, cluster.ErrExists) {
			continue // another producer registered one concurrently; look again
		}
		return v, err
	}
}

// checkCompatible is the BACKWARD check (a consumer with the new schema
// can read data written with the old one): the type may not change; for
// AVRO and JSON record schemas, every field the new schema adds must have
// a default.
func checkCompatible(old storedSchema, s *pb.Schema) error {
	if old.Deleted {
		return nil
	}
	if old.Type != schemaTypeName(s) {
		return fmt.Errorf("%w: type %s cannot follow %s", ErrIncompatibleSchema, schemaTypeName(s), old.Type)
	}
	if s.GetType() != pb.Schema_Avro && s.GetType() != pb.Schema_Json {
		return nil
	}
	type field struct {
		Name    string          `json:"name"`
		Default json.RawMessage `json:"default"`
	}
	type record struct {
		Fields []field `json:"fields"`
	}
	var o, n record
	if json.Unmarshal(old.Data, &o) != nil || json.Unmarshal(s.SchemaData, &n) != nil {
		return nil // not a record definition we can compare
	}
	had := map[string]bool{}
	for _, f := range o.Fields {
		had[f.Name] = true
	}
	for _, f := range n.Fields {
		if !had[f.Name] && f.Default == nil {
			return fmt.Errorf("%w: new field %q has no default, so data written with the previous version cannot be read", ErrIncompatibleSchema, f.Name)
		}
	}
	return nil
}

func (t *Topic) schemaFor(ctx context.Context, s *pb.Schema) ([]byte, error) {
	if s.GetType() == pb.Schema_None && len(s.SchemaData) == 0 {
		return nil, nil
	}
	v, err := t.b.getOrCreateSchema(ctx, t.name, s)
	if err != nil {
		return nil, err
	}
	return versionBytes(v), nil
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
	tn, err := ParseTopic(m.GetTopic())
	if err != nil {
		schemaError(c, pb.BaseCommand_GET_SCHEMA_RESPONSE, m.GetRequestId(), pb.ServerError_TopicNotFound, err.Error())
		return
	}
	all, err := c.b.Schemas(ctx, tn)
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
		SchemaVersion: versionBytes(v),
	}})
}

func (c *conn) handleGetOrCreateSchema(m *pb.CommandGetOrCreateSchema) {
	ctx, cancel := c.ctx()
	defer cancel()
	tn, err := ParseTopic(m.GetTopic())
	if err != nil {
		schemaError(c, pb.BaseCommand_GET_OR_CREATE_SCHEMA_RESPONSE, m.GetRequestId(), pb.ServerError_TopicNotFound, err.Error())
		return
	}
	v, err := c.b.getOrCreateSchema(ctx, tn, m.GetSchema())
	if err != nil {
		code := pb.ServerError_MetadataError
		if errors.Is(err, ErrIncompatibleSchema) {
			code = pb.ServerError_IncompatibleSchema
		}
		schemaError(c, pb.BaseCommand_GET_OR_CREATE_SCHEMA_RESPONSE, m.GetRequestId(), code, err.Error())
		return
	}
	c.send(&pb.BaseCommand{Type: pb.BaseCommand_GET_OR_CREATE_SCHEMA_RESPONSE.Enum(), GetOrCreateSchemaResponse: &pb.CommandGetOrCreateSchemaResponse{
		RequestId: proto.Uint64(m.GetRequestId()), SchemaVersion: versionBytes(v)}})
}

// parseVersion parses an admin path's schema version.
func parseVersion(s string) (int64, error) {
	return strconv.ParseInt(strings.TrimSpace(s), 10, 64)
}

// schemaTypeFromAdmin maps the admin API's type names (JSON, AVRO,
// STRING, PROTOBUF, ...) to the protocol enum's names.
func schemaTypeFromAdmin(t string) string {
	switch strings.ToUpper(t) {
	case "JSON":
		return "Json"
	case "AVRO":
		return "Avro"
	case "STRING":
		return "String"
	case "PROTOBUF":
		return "Protobuf"
	case "BYTES", "NONE":
		return "None"
	case "KEY_VALUE", "KEYVALUE":
		return "KeyValue"
	}
	return t
}

// deleteSchema marks the topic's schema deleted (a tombstone version, as
// Pulsar does): producers may then register any schema as a new version.
func (b *Broker) deleteSchema(ctx context.Context, t TopicName) error {
	all, err := b.Schemas(ctx, t)
	if err != nil {
		return err
	}
	if len(all) == 0 || all[len(all)-1].Deleted {
		return fmt.Errorf("%w: schema of %s", ErrNotFound, t)
	}
	val, _ := json.Marshal(storedSchema{Deleted: true})
	_, err = b.cfg.GlobalStore.Create(ctx, schemaDir(t)+fmt.Sprintf("%020d", len(all)), val)
	return err
}
