package admin

import "testing"

// Issue 29: a region's ClusterData joins its brokers' registered URLs of
// one scheme as Pulsar's multi-host URL (scheme once, hosts sorted, each
// once), keeping TLS and plain ones apart.
func TestMultiHost(t *testing.T) {
	urls := []string{"pulsar://b:6650", "pulsar+ssl://c:6651", "pulsar://a:6650", "pulsar://b:6650", "https://d:8443", "http://e:8080", ""}
	for scheme, want := range map[string]string{
		"pulsar":     "pulsar://a:6650,b:6650",
		"pulsar+ssl": "pulsar+ssl://c:6651",
		"https":      "https://d:8443",
		"http":       "http://e:8080",
		"ftp":        "",
	} {
		if got := multiHost(urls, scheme); got != want {
			t.Errorf("multiHost(%s) = %q, want %q", scheme, got, want)
		}
	}
	if got := multiHost(nil, "pulsar"); got != "" {
		t.Errorf("no URLs: %q", got)
	}
}
