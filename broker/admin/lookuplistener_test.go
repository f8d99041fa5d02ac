package admin

import (
	"net/http/httptest"
	"testing"

	"github.com/meridian-mq/meridian/broker/meta"
)

// The listener an HTTP lookup is answered in: the query parameter, else
// the header, else the one listener whose host the client reached.
func TestHTTPLookupListener(t *testing.T) {
	self := BrokerInfo{Listeners: map[string]string{
		"internal": "pulsar://broker-1:6650", "external": "pulsar://203.0.113.7:16650",
		"lb-a": "pulsar://lb.example.com:6651", "lb-b": "pulsar://lb.example.com:6652",
		"public": "pulsar://pulsar.example.com:6651",
	}, HTTPListeners: meta.HTTPListeners{
		// public's admin API is behind a name of its own; external's web
		// service URL is on its own host, counted once.
		"public":   {HTTPS: "https://admin.example.com:443"},
		"external": {HTTP: "http://203.0.113.7:18080"},
	}}
	for _, c := range []struct{ target, host, header, want string }{
		{"/x?listenerName=external", "broker-1:8080", "internal", "external"},
		{"/x", "broker-1:8080", "external", "external"},
		{"/x", "203.0.113.7:18080", "", "external"},
		{"/x", "BROKER-1:8080", "", "internal"},
		{"/x", "203.0.113.7", "", "external"},
		{"/x", "lb.example.com:8080", "", ""}, // two listeners: the internal one
		{"/x", "10.0.0.1:8080", "", ""},
		{"/x", "admin.example.com", "", "public"},
		{"/x", "pulsar.example.com:8080", "", "public"},
	} {
		r := httptest.NewRequest("GET", c.target, nil)
		r.Host = c.host
		if c.header != "" {
			r.Header.Set(ListenerNameHeader, c.header)
		}
		if got := httpLookupListener(r, self); got != c.want {
			t.Errorf("%s Host %s header %q: %q, want %q", c.target, c.host, c.header, got, c.want)
		}
	}
	r := httptest.NewRequest("GET", "/x", nil)
	r.Host = "203.0.113.7:18080"
	if got := httpLookupListener(r, BrokerInfo{}); got != "" {
		t.Errorf("no listeners: %q", got)
	}
}
