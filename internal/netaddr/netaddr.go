// Package netaddr holds the rule every Meridian listener follows for the
// address it advertises when none is configured: the listen address, with
// a wildcard host (0.0.0.0, ::, or none) replaced by the machine's host
// name — as Pulsar's advertisedAddress defaults to the host's name — so a
// process listening on every interface (a container) still tells others
// a name they can dial. The package is pure: the host name is an input.
package netaddr

import (
	"net"
	"os"
)

// Advertised returns addr (host:port) with a wildcard host replaced by
// hostname() (os.Hostname when nil). An addr that is not host:port, or a
// hostname that fails or is empty, leaves addr as it is.
func Advertised(addr string, hostname func() (string, error)) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || !IsWildcard(host) {
		return addr
	}
	if hostname == nil {
		hostname = os.Hostname
	}
	h, err := hostname()
	if err != nil || h == "" {
		return addr
	}
	return net.JoinHostPort(h, port)
}

// IsWildcard reports whether host names every interface ("", 0.0.0.0,
// ::): an address to listen on, never one to dial.
func IsWildcard(host string) bool {
	if host == "" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsUnspecified()
}
