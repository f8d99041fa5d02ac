package broker

import (
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// MetricNamesForTest returns the name of every metric a broker's registry
// describes (its collectors' series included, exported or not yet).
func MetricNamesForTest() map[string]bool {
	b := &Broker{}
	m := newMetrics("test", b)
	ch := make(chan *prometheus.Desc, 64)
	go func() { m.reg.Describe(ch); close(ch) }()
	names := map[string]bool{}
	for d := range ch {
		names[descName(d)] = true
	}
	return names
}

// descName is a Desc's fully-qualified name (Desc prints it, and keeps it
// unexported).
func descName(d *prometheus.Desc) string {
	s := d.String()
	const k = `fqName: "`
	i := strings.Index(s, k)
	if i < 0 {
		panic("prometheus.Desc prints no fqName: " + s)
	}
	s = s[i+len(k):]
	return s[:strings.IndexByte(s, '"')]
}
