package netaddr

import (
	"errors"
	"testing"
)

// TestAdvertisedReplacesOnlyWildcardHosts: a process listening on every
// interface advertises its host name; one listening on a named address
// advertises that address; a broken host name changes nothing.
func TestAdvertisedReplacesOnlyWildcardHosts(t *testing.T) {
	host := func() (string, error) { return "broker-1.east", nil }
	for _, c := range []struct{ in, want string }{
		{"0.0.0.0:6650", "broker-1.east:6650"},
		{"[::]:6650", "broker-1.east:6650"},
		{":6650", "broker-1.east:6650"},
		{"127.0.0.1:6650", "127.0.0.1:6650"},
		{"10.0.0.5:3181", "10.0.0.5:3181"},
		{"east-broker:6650", "east-broker:6650"},
		{"not-an-address", "not-an-address"},
	} {
		if got := Advertised(c.in, host); got != c.want {
			t.Errorf("Advertised(%q) = %q, want %q", c.in, got, c.want)
		}
	}
	if got := Advertised("0.0.0.0:1", func() (string, error) { return "", errors.New("no name") }); got != "0.0.0.0:1" {
		t.Errorf("with a failing host name: %q", got)
	}
}
