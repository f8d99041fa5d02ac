package admin

import (
	"strconv"
	"strings"
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
