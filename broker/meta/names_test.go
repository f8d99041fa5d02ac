package meta

import (
	"errors"
	"strings"
	"testing"
)

func TestParseTopic(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		part     int
	}{
		{"my-topic", "persistent://public/default/my-topic", -1},
		{"acme/orders/o1", "persistent://acme/orders/o1", -1},
		{"persistent://acme/orders/o1-partition-3", "persistent://acme/orders/o1-partition-3", 3},
		{"persistent://a/b/c.d_e:f=g", "persistent://a/b/c.d_e:f=g", -1},
		{"non-persistent://a/b/c", "non-persistent://a/b/c", -1},
	} {
		got, err := ParseTopic(tc.in)
		if err != nil {
			t.Fatalf("%s: %v", tc.in, err)
		}
		if got.String() != tc.want || got.Partition != tc.part {
			t.Errorf("%s: got %s partition %d", tc.in, got, got.Partition)
		}
	}
	for _, bad := range []string{"", "a/b", "persistent://a/b/c/d", "persistent://../b/c", "persistent://a/../c",
		"persistent://a/b/..", "other://a/b/c", "non-persistent://a/../c", "persistent://a/b/c d", "persistent://a//c", "a/b/c\x00"} {
		if _, err := ParseTopic(bad); !errors.Is(err, ErrInvalidName) {
			t.Errorf("%q: got %v, want ErrInvalidName", bad, err)
		}
	}
	p, _ := ParseTopic("acme/orders/o1-partition-7")
	if p.PartitionedParent().String() != "persistent://acme/orders/o1" {
		t.Errorf("parent of %s: %s", p, p.PartitionedParent())
	}
}

func TestValidProducerName(t *testing.T) {
	for _, c := range []struct {
		name string
		ok   bool
	}{
		{"", true}, // the broker names it
		{"standalone-127.0.0.1:6650-42", true},
		{strings.Repeat("a", MaxProducerNameBytes), true},
		{strings.Repeat("é", MaxProducerNameBytes/2), true},
		{strings.Repeat("a", MaxProducerNameBytes+1), false},
		{strings.Repeat("a", 2048), false},
		{"bad-\xff", false},
	} {
		err := ValidProducerName(c.name)
		if (err == nil) != c.ok || err != nil && !errors.Is(err, ErrNotAllowed) {
			t.Errorf("ValidProducerName(%d bytes %.20q) = %v, want ok=%v (ErrNotAllowed otherwise)", len(c.name), c.name, err, c.ok)
		}
	}
}
