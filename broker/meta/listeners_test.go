package meta

import (
	"errors"
	"strings"
	"testing"
)

// Pulsar's advertisedListeners form and its rules (PIP-61's validator):
// the first listener is the internal one unless internalListenerName
// names another; a name twice, a host:port under two names, an entry
// without a name, or an internal name that is no listener are refused.
func TestParseAdvertisedListenersFollowsPulsarsRules(t *testing.T) {
	ls, internal, err := ParseAdvertisedListeners([]string{"internal:pulsar://10.0.0.5:6650", " external : pulsar://broker-1.example.com:6652"}, "", "pulsar://")
	if err != nil {
		t.Fatal(err)
	}
	if internal != "internal" || ls["internal"] != "pulsar://10.0.0.5:6650" || ls["external"] != "pulsar://broker-1.example.com:6652" || len(ls) != 2 {
		t.Fatalf("got %v, internal %q", ls, internal)
	}
	if _, internal, _ := ParseAdvertisedListeners([]string{"a:pulsar://h:1", "b:pulsar://h:2"}, "b", "pulsar://"); internal != "b" {
		t.Errorf("internalListenerName b: got %q", internal)
	}
	if ls, internal, err := ParseAdvertisedListeners(nil, "", "pulsar://"); err != nil || ls != nil || internal != "" {
		t.Errorf("none: %v %q %v", ls, internal, err)
	}
	for _, c := range []struct {
		entries  []string
		internal string
		scheme   string
		want     string
	}{
		{[]string{"pulsar://h:1"}, "", "pulsar://", "want NAME:"},
		{[]string{"a:pulsar://h:1", "a:pulsar://h:2"}, "", "pulsar://", "listener a given twice"},
		{[]string{"a:pulsar://h:1", "b:pulsar://h:1"}, "", "pulsar://", "h:1 is listener a's already"},
		{[]string{"a:pulsar://h:1"}, "b", "pulsar://", `internal listener "b" is none`},
		{nil, "b", "pulsar://", "no advertised listeners"},
		{[]string{"a:pulsar+ssl://h:1"}, "", "pulsar://", "serves pulsar:// only (TLS is off)"},
		{[]string{"a:pulsar://h:1"}, "", "pulsar+ssl://", "serves pulsar+ssl:// only (TLS is on)"},
		{[]string{"a:pulsar://h"}, "", "pulsar://", "has no port"},
		{[]string{"a b:pulsar://h:1"}, "", "pulsar://", "want letters"},
		{[]string{"a:pulsar://h:1/x"}, "", "pulsar://", "nothing after the port"},
	} {
		_, _, err := ParseAdvertisedListeners(c.entries, c.internal, c.scheme)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v internal %q: err %v, want %q", c.entries, c.internal, err, c.want)
		}
	}
}

// A bind address names one of the listeners; its socket is host:port.
func TestParseBindAddresses(t *testing.T) {
	ls := Listeners{"internal": "pulsar://a:6650", "external": "pulsar://b:6652"}
	bs, err := ParseBindAddresses([]string{"external:pulsar://0.0.0.0:6652"}, ls, "pulsar://")
	if err != nil || len(bs) != 1 || bs[0] != (BindAddress{Listener: "external", Addr: "0.0.0.0:6652"}) {
		t.Fatalf("got %v, %v", bs, err)
	}
	if _, err := ParseBindAddresses([]string{"other:pulsar://0.0.0.0:6653"}, ls, "pulsar://"); err == nil || !strings.Contains(err.Error(), "listener other is none") {
		t.Errorf("unknown listener: %v", err)
	}
}

// A lookup names a listener or none (the internal one); a name the
// broker lacks gets Pulsar's error, a retriable ServiceNotReady.
func TestListenerURLFor(t *testing.T) {
	ls := Listeners{"internal": "pulsar://a:6650", "external": "pulsar://b:6652"}
	for name, want := range map[string]string{"": "pulsar://a:6650", "internal": "pulsar://a:6650", "external": "pulsar://b:6652"} {
		if got, err := ls.URLFor("pulsar://a:6650", name); err != nil || got != want {
			t.Errorf("%q: %q, %v", name, got, err)
		}
	}
	_, err := ls.URLFor("pulsar://a:6650", "public")
	if !errors.Is(err, ErrServiceNotReady) || !strings.Contains(err.Error(), "the broker do not have public listener") {
		t.Errorf("unknown listener: %v", err)
	}
	if _, err := Listeners(nil).URLFor("pulsar://a:6650", "external"); err == nil {
		t.Error("a broker without listeners has no external one")
	}
}

// Requirement (issue 28, Pulsar's advertisedListeners with web service
// URLs): a listener may name one http:// and one https:// URL beside its
// pulsar URL; ParseAdvertisedListeners takes the pulsar ones only, and a
// lookup in a listener answers its http URL (https first over TLS), a
// listener without one the broker's own admin URL (ok false).
func TestParseHTTPListenersFollowsPulsarsRules(t *testing.T) {
	entries := []string{"internal:pulsar://10.0.0.5:6650", "internal:http://10.0.0.5:8080",
		"external:pulsar://b1.example.com:6652", "external:http://b1.example.com:8080", "external:https://b1.example.com:8443",
		"other:pulsar://b1.other.com:6652"}
	ls, internal, err := ParseAdvertisedListeners(entries, "", "pulsar://")
	if err != nil || internal != "internal" || len(ls) != 3 || ls["external"] != "pulsar://b1.example.com:6652" {
		t.Fatalf("pulsar listeners: %v %q %v", ls, internal, err)
	}
	hl, err := ParseHTTPListeners(entries, ls)
	if err != nil {
		t.Fatal(err)
	}
	want := HTTPListeners{"internal": {HTTP: "http://10.0.0.5:8080"}, "external": {HTTP: "http://b1.example.com:8080", HTTPS: "https://b1.example.com:8443"}}
	if len(hl) != len(want) || hl["internal"] != want["internal"] || hl["external"] != want["external"] {
		t.Fatalf("http listeners %v, want %v", hl, want)
	}
	for _, c := range []struct {
		name string
		tls  bool
		want string
	}{
		{"external", false, "http://b1.example.com:8080"},
		{"external", true, "https://b1.example.com:8443"},
		{"internal", true, "http://10.0.0.5:8080"},
		{"other", false, ""},
		{"", false, ""},
	} {
		if u, ok := hl.URLFor(c.name, c.tls); u != c.want || ok != (c.want != "") {
			t.Errorf("URLFor(%q, tls %v) = %q %v, want %q", c.name, c.tls, u, ok, c.want)
		}
	}
	if hl, err := ParseHTTPListeners([]string{"a:pulsar://h:1"}, Listeners{"a": "pulsar://h:1"}); err != nil || hl != nil {
		t.Errorf("no http entries: %v %v", hl, err)
	}
	for _, c := range []struct {
		entries []string
		want    string
	}{
		{[]string{"a:pulsar://h:1", "a:http://h:2", "a:http://h:3"}, "listener a has an http:// URL already"},
		{[]string{"a:pulsar://h:1", "a:https://h:2", "a:https://h:3"}, "listener a has an https:// URL already"},
		{[]string{"a:pulsar://h:1", "b:http://h:2"}, "listener b has no pulsar URL"},
		{[]string{"a:pulsar://h:1", "b:pulsar://g:1", "a:http://h:2", "b:http://h:2"}, "h:2 is listener a's web service address already"},
		{[]string{"a:pulsar://h:1", "a:http://h"}, "has no port"},
		{[]string{"a:pulsar://h:1", "a:http://h:2/admin"}, "nothing after the port"},
	} {
		ls, _, err := ParseAdvertisedListeners(c.entries, "", "pulsar://")
		if err != nil {
			t.Fatalf("%v: %v", c.entries, err)
		}
		if _, err := ParseHTTPListeners(c.entries, ls); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: err %v, want %q", c.entries, err, c.want)
		}
	}
	if _, _, err := ParseAdvertisedListeners([]string{"a:http://h:2"}, "", "pulsar://"); err == nil || !strings.Contains(err.Error(), "no pulsar://HOST:PORT") {
		t.Errorf("http only: %v", err)
	}
}
