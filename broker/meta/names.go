package meta

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// ErrInvalidName is returned for a topic, tenant or namespace name that is
// not allowed.
var ErrInvalidName = errors.New("broker: invalid name")

// TopicName is a parsed, validated topic name:
// persistent://tenant/namespace/local[-partition-N].
type TopicName struct {
	Domain    string // "persistent" or "non-persistent"
	Tenant    string
	Namespace string
	Local     string // includes the -partition-N suffix for a partition
	// Partition is N for "-partition-N", -1 otherwise.
	Partition int
}

const partitionSuffix = "-partition-"

// ParseTopic parses the forms clients use: "persistent://t/ns/x", "t/ns/x"
// and "x" (public/default). Parts must be non-empty, must not be "." or
// "..", and may hold letters, digits and "-_.:=" only (no "/" inside a part,
// no path tricks).
func ParseTopic(s string) (TopicName, error) {
	orig := s
	domain := "persistent"
	if i := strings.Index(s, "://"); i >= 0 {
		domain = s[:i]
		s = s[i+3:]
	}
	if domain != "persistent" && domain != "non-persistent" {
		return TopicName{}, fmt.Errorf("%w: topic %q: want persistent:// or non-persistent://", ErrInvalidName, orig)
	}
	parts := strings.Split(s, "/")
	var t TopicName
	switch len(parts) {
	case 1:
		t = TopicName{Domain: domain, Tenant: "public", Namespace: "default", Local: parts[0]}
	case 3:
		t = TopicName{Domain: domain, Tenant: parts[0], Namespace: parts[1], Local: parts[2]}
	default:
		return TopicName{}, fmt.Errorf("%w: topic %q: want persistent://tenant/namespace/topic", ErrInvalidName, orig)
	}
	for _, p := range []struct{ what, v string }{{"tenant", t.Tenant}, {"namespace", t.Namespace}, {"topic", t.Local}} {
		if err := validPart(p.what, p.v); err != nil {
			return TopicName{}, fmt.Errorf("%w (in %q)", err, orig)
		}
	}
	t.Partition = -1
	if i := strings.LastIndex(t.Local, partitionSuffix); i > 0 {
		if n, err := strconv.Atoi(t.Local[i+len(partitionSuffix):]); err == nil && n >= 0 {
			t.Partition = n
		}
	}
	return t, nil
}

// validPart checks one name part.
func validPart(what, v string) error {
	if v == "" || v == "." || v == ".." {
		return fmt.Errorf("%w: empty or dot %s name %q", ErrInvalidName, what, v)
	}
	if len(v) > 255 {
		return fmt.Errorf("%w: %s name longer than 255 bytes", ErrInvalidName, what)
	}
	for _, r := range v {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
		case r == '-' || r == '_' || r == '.' || r == ':' || r == '=':
		default:
			return fmt.Errorf("%w: %s name %q has character %q", ErrInvalidName, what, v, r)
		}
	}
	return nil
}

// validSubscription checks a subscription name (ErrNotAllowed, not
// ErrInvalidName, whose TopicNotFound would tell the client the topic is
// gone). Cursor keys escape the name, so "/" and dots are allowed, but it
// must be valid UTF-8 without control characters (it is a metrics label
// and appears in admin JSON) and at most 1024 bytes.
func ValidSubscription(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: empty subscription name", ErrNotAllowed)
	case len(name) > 1024:
		return fmt.Errorf("%w: subscription name longer than 1024 bytes", ErrNotAllowed)
	case !utf8.ValidString(name):
		return fmt.Errorf("%w: subscription name %q is not valid UTF-8", ErrNotAllowed, name)
	case strings.IndexFunc(name, unicode.IsControl) >= 0:
		return fmt.Errorf("%w: subscription name %q has a control character", ErrNotAllowed, name)
	}
	return nil
}

// MaxProducerNameBytes bounds a producer name. The broker keeps
// deduplication state per producer name (its last sequence id, in memory
// and in the topic's snapshot) for as long as the producer may come back,
// so a client choosing long names would grow both without bound. Pulsar
// derives names like "<cluster>-<broker id>-<n>"; 256 bytes leaves room
// for any name a client library or application generates (UUIDs, host
// names, pod names).
const MaxProducerNameBytes = 256

// ValidProducerName checks a producer name a client chose (empty: the
// broker names the producer): at most MaxProducerNameBytes of valid UTF-8
// (the dedup snapshot is JSON, which would turn other bytes into U+FFFD,
// and a name is shown in admin stats). ErrNotAllowed: the Go client fails
// the producer's creation with the message rather than retrying.
func ValidProducerName(name string) error {
	switch {
	case len(name) > MaxProducerNameBytes:
		return fmt.Errorf("%w: producer name of %d bytes is longer than the limit of %d bytes", ErrNotAllowed, len(name), MaxProducerNameBytes)
	case !utf8.ValidString(name):
		return fmt.Errorf("%w: producer name %q is not valid UTF-8", ErrNotAllowed, name)
	}
	return nil
}

// ValidateTenant and ValidateNamespace check admin-supplied names.
func ValidateTenant(t string) error { return validPart("tenant", t) }

// ValidateNamespace checks "tenant/namespace".
func ValidateNamespace(ns string) error {
	parts := strings.Split(ns, "/")
	if len(parts) != 2 {
		return fmt.Errorf("%w: namespace %q: want tenant/namespace", ErrInvalidName, ns)
	}
	if err := validPart("tenant", parts[0]); err != nil {
		return err
	}
	return validPart("namespace", parts[1])
}

// Persistent reports whether the topic is a persistent one (stored in a
// managed ledger); a non-persistent one (non-persistent://) is never
// stored (broker/nonpersistent.go).
func (t TopicName) Persistent() bool { return t.Domain == "persistent" }

// String returns the fully qualified name.
func (t TopicName) String() string {
	return t.Domain + "://" + t.Tenant + "/" + t.Namespace + "/" + t.Local
}

// NamespaceName returns "tenant/namespace".
func (t TopicName) NamespaceName() string { return t.Tenant + "/" + t.Namespace }

// PartitionedParent returns the name without its -partition-N suffix.
func (t TopicName) PartitionedParent() TopicName {
	if t.Partition < 0 {
		return t
	}
	p := t
	p.Local = t.Local[:strings.LastIndex(t.Local, partitionSuffix)]
	p.Partition = -1
	return p
}

// PartitionName returns the name of partition i of this (parent) topic.
func (t TopicName) PartitionName(i int) TopicName {
	p := t
	p.Local = fmt.Sprintf("%s%s%d", t.Local, partitionSuffix, i)
	p.Partition = i
	return p
}

// ManagedLedgerName is the managed ledger's name: tenant/ns/persistent/local.
func (t TopicName) ManagedLedgerName() string {
	return t.Tenant + "/" + t.Namespace + "/" + t.Domain + "/" + t.Local
}
