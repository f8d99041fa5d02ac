package meta

import (
	"errors"
	"testing"

	pb "github.com/meridian-mq/meridian/proto/pulsarpb"
)

// The BACKWARD check: a reader with the new schema reads what the old one
// wrote. Issue 29: a field changing int to string was accepted.
func TestCheckCompatibleBackward(t *testing.T) {
	old := StoredSchema{Type: pb.Schema_Json.String(), Data: []byte(`{"type":"record","name":"R","fields":[{"name":"a","type":"int"},{"name":"s","type":"string"},{"name":"u","type":["null","int"]}]}`)}
	for _, tc := range []struct {
		name, def string
		ok        bool
	}{
		{"same", `{"type":"record","name":"R","fields":[{"name":"a","type":"int"},{"name":"s","type":"string"},{"name":"u","type":["null","int"]}]}`, true},
		{"added with default", `{"type":"record","name":"R","fields":[{"name":"a","type":"int"},{"name":"b","type":"int","default":0}]}`, true},
		{"added without default", `{"type":"record","name":"R","fields":[{"name":"a","type":"int"},{"name":"b","type":"int"}]}`, false},
		{"int to long", `{"type":"record","name":"R","fields":[{"name":"a","type":"long"}]}`, true},
		{"int to double, object form", `{"type":"record","name":"R","fields":[{"name":"a","type":{"type":"double"}}]}`, true},
		{"string to bytes", `{"type":"record","name":"R","fields":[{"name":"s","type":"bytes"}]}`, true},
		{"int to string", `{"type":"record","name":"R","fields":[{"name":"a","type":"string"}]}`, false},
		{"string to int", `{"type":"record","name":"R","fields":[{"name":"s","type":"int"}]}`, false},
		{"int to boolean", `{"type":"record","name":"R","fields":[{"name":"a","type":"boolean"}]}`, false},
		{"union not compared", `{"type":"record","name":"R","fields":[{"name":"u","type":["null","string"]}]}`, true},
	} {
		err := checkCompatible(old, &pb.Schema{Type: pb.Schema_Json.Enum(), SchemaData: []byte(tc.def)})
		if tc.ok && err != nil {
			t.Errorf("%s: %v, want compatible", tc.name, err)
		}
		if !tc.ok && !errors.Is(err, ErrIncompatibleSchema) {
			t.Errorf("%s: %v, want ErrIncompatibleSchema", tc.name, err)
		}
	}
}
