package meta

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"

	pb "github.com/meridian-mq/meridian/proto/pulsarpb"

	"github.com/meridian-mq/meridian/cluster"
)

// Schemas are stored per topic (the parent of a partitioned topic) under
// /schemas/TENANT/NS/TOPIC/VERSION (VERSION zero-padded), each a
// storedSchema. Versions count from 0, as Pulsar's; a version on the wire
// is 8 bytes big-endian. They are shared by every region through the
// global store so every region has the same version numbers (they live in
// Config.GlobalStore).
type StoredSchema struct {
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

func VersionBytes(v int64) []byte { return binary.BigEndian.AppendUint64(nil, uint64(v)) }

// Schemas returns every stored version of a topic's schema, ascending.
func (m *Metadata) Schemas(ctx context.Context, t TopicName) ([]StoredSchema, error) {
	kvs, _, err := m.s.List(ctx, schemaDir(t))
	if err != nil {
		return nil, err
	}
	out := make([]StoredSchema, 0, len(kvs))
	for _, kv := range kvs {
		var s StoredSchema
		if err := json.Unmarshal(kv.Value, &s); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

func schemaTypeName(s *pb.Schema) string { return s.GetType().String() }

// GetOrCreateSchema returns the version of an identical stored schema, or
// stores s as a new version after the compatibility check.
func (m *Metadata) GetOrCreateSchema(ctx context.Context, t TopicName, s *pb.Schema) (int64, error) {
	for {
		all, err := m.Schemas(ctx, t)
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
		val, _ := json.Marshal(StoredSchema{Type: schemaTypeName(s), Data: s.SchemaData, Properties: props})
		v := int64(len(all))
		_, err = m.s.Create(ctx, schemaDir(t)+fmt.Sprintf("%020d", v), val)
		if errors.Is(err, cluster.ErrExists) {
			continue // another producer registered one concurrently; look again
		}
		return v, err
	}
}

// checkCompatible is the BACKWARD check (a consumer with the new schema
// can read data written with the old one): the type may not change; for
// AVRO and JSON record schemas, every field the new schema adds must have
// a default, and a field both have may change its primitive type only as
// Avro promotes it (int to long, float or double; long to float or
// double; float to double; string and bytes either way). A field whose
// type is not primitive in both (a union, a record, ...) is not compared.
func checkCompatible(old StoredSchema, s *pb.Schema) error {
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
		Type    json.RawMessage `json:"type"`
		Default json.RawMessage `json:"default"`
	}
	type record struct {
		Fields []field `json:"fields"`
	}
	var o, n record
	if json.Unmarshal(old.Data, &o) != nil || json.Unmarshal(s.SchemaData, &n) != nil {
		return nil // not a record definition we can compare
	}
	had := map[string]field{}
	for _, f := range o.Fields {
		had[f.Name] = f
	}
	for _, f := range n.Fields {
		of, ok := had[f.Name]
		if !ok && f.Default == nil {
			return fmt.Errorf("%w: new field %q has no default, so data written with the previous version cannot be read", ErrIncompatibleSchema, f.Name)
		}
		if ok {
			if w, r := primitiveType(of.Type), primitiveType(f.Type); w != "" && r != "" && !avroPromotes(w, r) {
				return fmt.Errorf("%w: field %q changes type from %s to %s, which data written with the previous version cannot be read as", ErrIncompatibleSchema, f.Name, w, r)
			}
		}
	}
	return nil
}

// primitiveType returns an Avro field type that is a primitive ("int",
// or {"type": "int"} without a logical type), else "".
func primitiveType(raw json.RawMessage) string {
	var name string
	if json.Unmarshal(raw, &name) != nil {
		var obj struct {
			Type        string `json:"type"`
			LogicalType string `json:"logicalType"`
		}
		if json.Unmarshal(raw, &obj) != nil || obj.LogicalType != "" {
			return ""
		}
		name = obj.Type
	}
	switch name {
	case "null", "boolean", "int", "long", "float", "double", "bytes", "string":
		return name
	}
	return ""
}

// avroPromotes reports whether a reader of type r reads what a writer of
// type w wrote (Avro's schema resolution).
func avroPromotes(w, r string) bool {
	switch {
	case w == r:
		return true
	case w == "int":
		return r == "long" || r == "float" || r == "double"
	case w == "long":
		return r == "float" || r == "double"
	case w == "float":
		return r == "double"
	case w == "string":
		return r == "bytes"
	case w == "bytes":
		return r == "string"
	}
	return false
}

// DeleteSchema marks the topic's schema deleted (a tombstone version, as
// Pulsar does): producers may then register any schema as a new version.
func (m *Metadata) DeleteSchema(ctx context.Context, t TopicName) error {
	all, err := m.Schemas(ctx, t)
	if err != nil {
		return err
	}
	if len(all) == 0 || all[len(all)-1].Deleted {
		return fmt.Errorf("%w: schema of %s", ErrNotFound, t)
	}
	val, _ := json.Marshal(StoredSchema{Deleted: true})
	_, err = m.s.Create(ctx, schemaDir(t)+fmt.Sprintf("%020d", len(all)), val)
	return err
}

// SchemaVersion returns the version of the stored schema identical to s
// (same type and definition), ErrNotFound if there is none.
func (m *Metadata) SchemaVersion(ctx context.Context, t TopicName, s *pb.Schema) (int64, error) {
	all, err := m.Schemas(ctx, t)
	if err != nil {
		return 0, err
	}
	for v := len(all) - 1; v >= 0; v-- {
		if !all[v].Deleted && all[v].Type == schemaTypeName(s) && bytes.Equal(all[v].Data, s.SchemaData) {
			return int64(v), nil
		}
	}
	return 0, fmt.Errorf("%w: no version of the schema of %s is this one", ErrNotFound, t)
}

// ErrNoSchema: the topic has never had a schema (no version stored).
var ErrNoSchema = errors.New("no schema")

// CheckConsumerSchema is Pulsar's check of a consumer's schema against
// the topic's (SchemaRegistryService.checkConsumerCompatibility under
// BACKWARD, Meridian's one strategy): s must read what the latest version
// wrote (checkCompatible). ErrNoSchema when the topic has no version at
// all; a topic whose latest version is a deletion has none to check
// against, which is ErrIncompatibleSchema, as Pulsar's
// NotExistSchemaException becomes on SUBSCRIBE.
func (m *Metadata) CheckConsumerSchema(ctx context.Context, t TopicName, s *pb.Schema) error {
	all, err := m.Schemas(ctx, t)
	if err != nil {
		return err
	}
	if len(all) == 0 {
		return fmt.Errorf("%w: %s", ErrNoSchema, t)
	}
	latest := all[len(all)-1]
	if latest.Deleted {
		return fmt.Errorf("%w: the schema of %s was deleted, so there is none to check a %s schema against (a producer registers a new one)", ErrIncompatibleSchema, t, schemaTypeName(s))
	}
	return checkCompatible(latest, s)
}

// CheckSchemaCompatible reports whether s would be accepted as the
// topic's next schema (ErrIncompatibleSchema if not), storing nothing.
func (m *Metadata) CheckSchemaCompatible(ctx context.Context, t TopicName, s *pb.Schema) error {
	all, err := m.Schemas(ctx, t)
	if err != nil || len(all) == 0 {
		return err
	}
	return checkCompatible(all[len(all)-1], s)
}
