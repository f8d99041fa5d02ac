package admin

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/meridian-mq/meridian/broker/meta"
	pb "github.com/meridian-mq/meridian/proto/pulsarpb"
	"google.golang.org/protobuf/proto"
)

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

// readSchemaPayload reads the topic r names (with topic) and Pulsar's
// PostSchemaPayload {type, schema, properties} as the protocol's schema of
// that topic.
func readSchemaPayload(r *http.Request, topic func(*http.Request) (meta.TopicName, error)) (meta.TopicName, *pb.Schema, error) {
	tn, err := topic(r)
	if err != nil {
		return tn, nil, err
	}
	var body struct {
		Type       string            `json:"type"`
		Schema     string            `json:"schema"`
		Properties map[string]string `json:"properties"`
	}
	if err := readJSON(r, &body, false); err != nil {
		return tn, nil, err
	}
	typ, ok := pb.Schema_Type_value[schemaTypeFromAdmin(body.Type)]
	if !ok {
		return tn, nil, meta.BadRequest(fmt.Errorf("schema type %q", body.Type))
	}
	// An Avro, JSON or Protobuf schema's definition is Avro's JSON: one
	// that is not JSON would be stored and then fail every compatibility
	// check of the topic's later schemas.
	switch pb.Schema_Type(typ) {
	case pb.Schema_Avro, pb.Schema_Json, pb.Schema_Protobuf:
		if !json.Valid([]byte(body.Schema)) {
			return tn, nil, meta.BadRequest(fmt.Errorf("schema: a %s schema's definition must be JSON (Avro's schema JSON)", strings.ToUpper(body.Type)))
		}
	}
	ps := &pb.Schema{Name: proto.String(tn.Local), Type: pb.Schema_Type(typ).Enum(), SchemaData: []byte(body.Schema)}
	for k, v := range body.Properties {
		ps.Properties = append(ps.Properties, &pb.KeyValue{Key: proto.String(k), Value: proto.String(v)})
	}
	return tn, ps, nil
}

// schemaCheckHandlers serves the schema questions that store nothing:
// POST .../version (the version of an identical stored schema) and POST
// .../compatibility (would it be accepted: Meridian's check is Pulsar's
// BACKWARD).
func (s *Server) schemaCheckHandlers(h func(string, func(*http.Request) (any, error)), topic func(*http.Request) (meta.TopicName, error)) {
	h("POST /admin/v2/schemas/{tenant}/{ns}/{topic}/version", func(r *http.Request) (any, error) {
		tn, ps, err := readSchemaPayload(r, topic)
		if err != nil {
			return nil, err
		}
		v, err := s.cfg.Meta.SchemaVersion(r.Context(), tn, ps)
		if err != nil {
			return nil, err
		}
		return map[string]int64{"version": v}, nil
	})
	h("POST /admin/v2/schemas/{tenant}/{ns}/{topic}/compatibility", func(r *http.Request) (any, error) {
		tn, ps, err := readSchemaPayload(r, topic)
		if err != nil {
			return nil, err
		}
		err = s.cfg.Meta.CheckSchemaCompatible(r.Context(), tn, ps)
		if err != nil && !errors.Is(err, meta.ErrIncompatibleSchema) {
			return nil, err
		}
		return map[string]any{"compatibility": err == nil, "schemaCompatibilityStrategy": "BACKWARD"}, nil
	})
}
