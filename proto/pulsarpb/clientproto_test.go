package pulsarpb_test

// A reader for the client's PulsarApi.proto text, just large enough for
// that file (proto2: syntax/package/option statements, nested messages and
// enums, fields with an optional [default = X]). It turns the text into a
// FileDescriptorProto so the tests can both compare declarations and decode
// our bytes with the client's schema through dynamicpb.

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
)

// clientModule is the pulsar-client-go version whose schema we must match.
const clientModule = "github.com/apache/pulsar-client-go@v0.19.0"

// clientPackage is the proto package we give the parsed client schema. It
// only lives in a private protoregistry, so it cannot clash with anything.
const clientPackage = "clientpulsar"

// clientProtoPath finds the client's PulsarApi.proto in the module cache.
func clientProtoPath(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMODCACHE").Output()
	if err != nil {
		t.Fatalf("go env GOMODCACHE: %v", err)
	}
	p := filepath.Join(strings.TrimSpace(string(out)), filepath.FromSlash(clientModule),
		"pulsar", "internal", "pulsar_proto", "PulsarApi.proto")
	if _, err := os.Stat(p); err != nil {
		t.Skipf("client proto not in the module cache (%v); `go mod download %s` to check", err, clientModule)
	}
	return p
}

// loadClientSchema parses the client's proto and builds its descriptor.
func loadClientSchema(t *testing.T) protoreflect.FileDescriptor {
	t.Helper()
	src, err := os.ReadFile(clientProtoPath(t))
	if err != nil {
		t.Fatal(err)
	}
	fdp, err := parseProto(string(src))
	if err != nil {
		t.Fatalf("parse client proto: %v", err)
	}
	fd, err := protodesc.NewFile(fdp, nil)
	if err != nil {
		t.Fatalf("build client descriptor: %v", err)
	}
	return fd
}

// tokenize splits proto text into identifiers, numbers, strings and single
// punctuation characters, dropping comments.
func tokenize(src string) ([]string, error) {
	var toks []string
	for i := 0; i < len(src); {
		c := src[i]
		switch {
		case c == '/' && i+1 < len(src) && src[i+1] == '/':
			for i < len(src) && src[i] != '\n' {
				i++
			}
		case c == '/' && i+1 < len(src) && src[i+1] == '*':
			end := strings.Index(src[i+2:], "*/")
			if end < 0 {
				return nil, fmt.Errorf("unterminated block comment at %d", i)
			}
			i += end + 4
		case unicode.IsSpace(rune(c)):
			i++
		case c == '"' || c == '\'':
			j := i + 1
			for j < len(src) && src[j] != c {
				j++
			}
			if j == len(src) {
				return nil, fmt.Errorf("unterminated string at %d", i)
			}
			toks = append(toks, src[i:j+1])
			i = j + 1
		case c == '_' || c == '.' || c == '-' || c == '+' || unicode.IsLetter(rune(c)) || unicode.IsDigit(rune(c)):
			j := i + 1
			for j < len(src) && (src[j] == '_' || src[j] == '.' || unicode.IsLetter(rune(src[j])) || unicode.IsDigit(rune(src[j]))) {
				j++
			}
			toks = append(toks, src[i:j])
			i = j
		default:
			toks = append(toks, string(c))
			i++
		}
	}
	return toks, nil
}

type protoParser struct {
	toks []string
	pos  int
}

func (p *protoParser) peek() string {
	if p.pos < len(p.toks) {
		return p.toks[p.pos]
	}
	return ""
}

func (p *protoParser) next() string {
	t := p.peek()
	p.pos++
	return t
}

func (p *protoParser) expect(want string) error {
	if got := p.next(); got != want {
		return fmt.Errorf("token %d: want %q, got %q", p.pos-1, want, got)
	}
	return nil
}

// skipStatement skips to the end of a statement we do not model.
func (p *protoParser) skipStatement() {
	for p.pos < len(p.toks) && p.next() != ";" {
	}
}

// parsedField keeps the type token until every name is known.
type parsedField struct {
	fd       *descriptorpb.FieldDescriptorProto
	typeTok  string
	scope    string // full name of the enclosing message, without package
	location string
}

var scalarTypes = map[string]descriptorpb.FieldDescriptorProto_Type{
	"double": descriptorpb.FieldDescriptorProto_TYPE_DOUBLE, "float": descriptorpb.FieldDescriptorProto_TYPE_FLOAT,
	"int32": descriptorpb.FieldDescriptorProto_TYPE_INT32, "int64": descriptorpb.FieldDescriptorProto_TYPE_INT64,
	"uint32": descriptorpb.FieldDescriptorProto_TYPE_UINT32, "uint64": descriptorpb.FieldDescriptorProto_TYPE_UINT64,
	"sint32": descriptorpb.FieldDescriptorProto_TYPE_SINT32, "sint64": descriptorpb.FieldDescriptorProto_TYPE_SINT64,
	"fixed32": descriptorpb.FieldDescriptorProto_TYPE_FIXED32, "fixed64": descriptorpb.FieldDescriptorProto_TYPE_FIXED64,
	"sfixed32": descriptorpb.FieldDescriptorProto_TYPE_SFIXED32, "sfixed64": descriptorpb.FieldDescriptorProto_TYPE_SFIXED64,
	"bool": descriptorpb.FieldDescriptorProto_TYPE_BOOL, "string": descriptorpb.FieldDescriptorProto_TYPE_STRING,
	"bytes": descriptorpb.FieldDescriptorProto_TYPE_BYTES,
}

// parseProto turns the client's proto text into a FileDescriptorProto in
// package clientPackage.
func parseProto(src string) (*descriptorpb.FileDescriptorProto, error) {
	toks, err := tokenize(src)
	if err != nil {
		return nil, err
	}
	p := &protoParser{toks: toks}
	fdp := &descriptorpb.FileDescriptorProto{
		Name:    proto.String("client/PulsarApi.proto"),
		Package: proto.String(clientPackage),
		Syntax:  proto.String("proto2"),
	}
	var fields []*parsedField
	messages := map[string]bool{}
	enums := map[string]bool{}
	for p.pos < len(p.toks) {
		switch p.peek() {
		case "message":
			m, err := p.parseMessage("", &fields, messages, enums)
			if err != nil {
				return nil, err
			}
			fdp.MessageType = append(fdp.MessageType, m)
		case "enum":
			e, err := p.parseEnum("", enums)
			if err != nil {
				return nil, err
			}
			fdp.EnumType = append(fdp.EnumType, e)
		default: // syntax, package, option
			p.skipStatement()
		}
	}
	for _, f := range fields {
		if t, ok := scalarTypes[f.typeTok]; ok {
			f.fd.Type = t.Enum()
			continue
		}
		name, ok := resolve(f.scope, f.typeTok, messages, enums)
		if !ok {
			return nil, fmt.Errorf("%s: unknown type %q", f.location, f.typeTok)
		}
		f.fd.TypeName = proto.String("." + clientPackage + "." + name)
		if messages[name] {
			f.fd.Type = descriptorpb.FieldDescriptorProto_TYPE_MESSAGE.Enum()
		} else {
			f.fd.Type = descriptorpb.FieldDescriptorProto_TYPE_ENUM.Enum()
		}
	}
	return fdp, nil
}

// resolve applies proto's scoping: innermost enclosing message first.
func resolve(scope, tok string, messages, enums map[string]bool) (string, bool) {
	for {
		cand := tok
		if scope != "" {
			cand = scope + "." + tok
		}
		if messages[cand] || enums[cand] {
			return cand, true
		}
		if scope == "" {
			return "", false
		}
		if i := strings.LastIndex(scope, "."); i >= 0 {
			scope = scope[:i]
		} else {
			scope = ""
		}
	}
}

func join(scope, name string) string {
	if scope == "" {
		return name
	}
	return scope + "." + name
}

func (p *protoParser) parseMessage(scope string, fields *[]*parsedField, messages, enums map[string]bool) (*descriptorpb.DescriptorProto, error) {
	if err := p.expect("message"); err != nil {
		return nil, err
	}
	name := p.next()
	full := join(scope, name)
	messages[full] = true
	m := &descriptorpb.DescriptorProto{Name: proto.String(name)}
	if err := p.expect("{"); err != nil {
		return nil, err
	}
	for {
		switch tok := p.peek(); tok {
		case "}":
			p.next()
			return m, nil
		case "":
			return nil, fmt.Errorf("message %s: unexpected end of file", full)
		case "message":
			nm, err := p.parseMessage(full, fields, messages, enums)
			if err != nil {
				return nil, err
			}
			m.NestedType = append(m.NestedType, nm)
		case "enum":
			e, err := p.parseEnum(full, enums)
			if err != nil {
				return nil, err
			}
			m.EnumType = append(m.EnumType, e)
		case "option", "reserved", "extensions":
			p.skipStatement()
		case "required", "optional", "repeated":
			f, err := p.parseField(full)
			if err != nil {
				return nil, err
			}
			m.Field = append(m.Field, f.fd)
			*fields = append(*fields, f)
		default:
			return nil, fmt.Errorf("message %s: unexpected token %q", full, tok)
		}
	}
}

func (p *protoParser) parseField(scope string) (*parsedField, error) {
	label := map[string]descriptorpb.FieldDescriptorProto_Label{
		"required": descriptorpb.FieldDescriptorProto_LABEL_REQUIRED,
		"optional": descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL,
		"repeated": descriptorpb.FieldDescriptorProto_LABEL_REPEATED,
	}[p.next()]
	typeTok := p.next()
	name := p.next()
	if err := p.expect("="); err != nil {
		return nil, fmt.Errorf("%s.%s: %w", scope, name, err)
	}
	num, err := strconv.Atoi(p.next())
	if err != nil {
		return nil, fmt.Errorf("%s.%s: field number: %w", scope, name, err)
	}
	fd := &descriptorpb.FieldDescriptorProto{
		Name:   proto.String(name),
		Number: proto.Int32(int32(num)),
		Label:  label.Enum(),
	}
	if p.peek() == "[" {
		p.next()
		for p.peek() != "]" {
			key := p.next()
			if err := p.expect("="); err != nil {
				return nil, fmt.Errorf("%s.%s: %w", scope, name, err)
			}
			val := p.next()
			if key == "default" {
				fd.DefaultValue = proto.String(strings.Trim(val, `"'`))
			}
			if p.peek() == "," {
				p.next()
			}
		}
		p.next()
	}
	if err := p.expect(";"); err != nil {
		return nil, fmt.Errorf("%s.%s: %w", scope, name, err)
	}
	return &parsedField{fd: fd, typeTok: typeTok, scope: scope, location: scope + "." + name}, nil
}

func (p *protoParser) parseEnum(scope string, enums map[string]bool) (*descriptorpb.EnumDescriptorProto, error) {
	if err := p.expect("enum"); err != nil {
		return nil, err
	}
	name := p.next()
	enums[join(scope, name)] = true
	e := &descriptorpb.EnumDescriptorProto{Name: proto.String(name)}
	if err := p.expect("{"); err != nil {
		return nil, err
	}
	for p.peek() != "}" {
		if p.peek() == "" {
			return nil, fmt.Errorf("enum %s: unexpected end of file", name)
		}
		if p.peek() == "option" || p.peek() == "reserved" {
			p.skipStatement()
			continue
		}
		vname := p.next()
		if err := p.expect("="); err != nil {
			return nil, fmt.Errorf("enum %s: %w", name, err)
		}
		n, err := strconv.Atoi(p.next())
		if err != nil {
			return nil, fmt.Errorf("enum %s value %s: %w", name, vname, err)
		}
		if p.peek() == "[" {
			for p.next() != "]" {
			}
		}
		if err := p.expect(";"); err != nil {
			return nil, fmt.Errorf("enum %s: %w", name, err)
		}
		e.Value = append(e.Value, &descriptorpb.EnumValueDescriptorProto{Name: proto.String(vname), Number: proto.Int32(int32(n))})
	}
	p.next()
	return e, nil
}
