package broker

import "testing"

// A wildcard admin socket is advertised by the broker's advertised host.
func TestAdvertisedAdminURL(t *testing.T) {
	for _, c := range []struct{ admin, service, want string }{
		{"http://[::]:8080", "pulsar://east-broker-1:6650", "http://east-broker-1:8080"},
		{"https://0.0.0.0:8443", "pulsar+ssl://10.1.2.3:6651", "https://10.1.2.3:8443"},
		{"http://127.0.0.1:8080", "pulsar://east-broker-1:6650", "http://127.0.0.1:8080"},
		{"http://[::]:8080", "pulsar://0.0.0.0:6650", "http://[::]:8080"},
		{"http://[::]:8080", "pulsar://[fd00::1]:6650", "http://[fd00::1]:8080"},
	} {
		if got := advertisedAdminURL(c.admin, c.service); got != c.want {
			t.Errorf("advertisedAdminURL(%s, %s) = %s, want %s", c.admin, c.service, got, c.want)
		}
	}
}
