package meta

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
)

// Advertised listeners, as Pulsar's advertisedListeners (PIP-61) and
// bindAddresses (PIP-95): a broker may be reached by several names — an
// internal one that brokers and clients inside its network use, an
// external one for clients outside (behind NAT, a load balancer, a
// Kubernetes Service) — and a client picks one by name in its LOOKUP
// (pulsar-client-go's ClientOptions.ListenerName sends
// advertised_listener_name). The lookup answers with the owner's URL of
// that listener; a name the owner does not have is refused with
// ServiceNotReady and Pulsar's message ("the broker do not have NAME
// listener"); no name means the internal listener — or, on a socket bound
// for a listener (bindAddresses), that listener.
//
// Meridian's broker serves one scheme on every socket (pulsar+ssl://
// when TLS is on, pulsar:// otherwise), so each listener has one URL of
// that scheme, where Pulsar allows one of each.

// Listeners maps a listener name to its URL (pulsar://host:port or
// pulsar+ssl://host:port).
type Listeners map[string]string

// ErrNoListener is the answer to a lookup naming a listener the broker
// does not have (Pulsar's words).
func ErrNoListener(name string) error {
	return fmt.Errorf("%w: the broker do not have %s listener", ErrServiceNotReady, name)
}

// URLFor returns the URL of listener name of a broker whose internal URL
// is internal and whose listeners are ls: "" is the internal URL.
func (ls Listeners) URLFor(internal, name string) (string, error) {
	if name == "" {
		return internal, nil
	}
	if u, ok := ls[name]; ok {
		return u, nil
	}
	return "", ErrNoListener(name)
}

// ParseAdvertisedListeners reads Pulsar's advertisedListeners form, one
// NAME:SCHEME://HOST:PORT per entry (the flag's comma-separated list),
// scheme being the broker's (pulsar:// or pulsar+ssl://), and returns
// the listeners and the internal listener's name: internal if given
// (it must be one of them), else the first entry's (as Pulsar's
// internalListenerName). As Pulsar it refuses an entry without a name,
// a name given twice, and one host:port under two names. No entries: no
// listeners (nil, "").
func ParseAdvertisedListeners(entries []string, internal, scheme string) (Listeners, string, error) {
	if len(entries) == 0 {
		if internal != "" {
			return nil, "", fmt.Errorf("internal listener %q: no advertised listeners", internal)
		}
		return nil, "", nil
	}
	ls := Listeners{}
	first := ""
	byHost := map[string]string{}
	var errs []error
	for _, e := range entries {
		name, u, err := parseNamedURL(e, scheme)
		if err != nil {
			errs = append(errs, fmt.Errorf("advertised listener %q: %w", e, err))
			continue
		}
		if first == "" {
			first = name
		}
		if _, dup := ls[name]; dup {
			errs = append(errs, fmt.Errorf("advertised listener %q: listener %s given twice (one %s URL per listener)", e, name, scheme))
			continue
		}
		hp := strings.TrimPrefix(u, scheme)
		if other, ok := byHost[hp]; ok {
			errs = append(errs, fmt.Errorf("advertised listener %q: %s is listener %s's already (one address per listener)", e, hp, other))
			continue
		}
		byHost[hp] = name
		ls[name] = u
	}
	if err := errors.Join(errs...); err != nil {
		return nil, "", err
	}
	if internal == "" {
		internal = first
	}
	if _, ok := ls[internal]; !ok {
		return nil, "", fmt.Errorf("internal listener %q is none of the advertised listeners", internal)
	}
	return ls, internal, nil
}

// BindAddress is a further socket of the Pulsar protocol (Pulsar's
// bindAddresses): a lookup arriving on it without a listener name is
// answered with Listener's URLs.
type BindAddress struct {
	Listener string
	Addr     string // host:port to listen on
}

// ParseBindAddresses reads Pulsar's bindAddresses form, one
// NAME:SCHEME://HOST:PORT per entry; every NAME must be one of ls.
func ParseBindAddresses(entries []string, ls Listeners, scheme string) ([]BindAddress, error) {
	var out []BindAddress
	var errs []error
	for _, e := range entries {
		name, u, err := parseNamedURL(e, scheme)
		if err != nil {
			errs = append(errs, fmt.Errorf("bind address %q: %w", e, err))
			continue
		}
		if _, ok := ls[name]; !ok {
			errs = append(errs, fmt.Errorf("bind address %q: listener %s is none of the advertised listeners", e, name))
			continue
		}
		out = append(out, BindAddress{Listener: name, Addr: strings.TrimPrefix(u, scheme)})
	}
	return out, errors.Join(errs...)
}

// parseNamedURL splits NAME:SCHEME://HOST:PORT, checking the scheme and
// the host:port.
func parseNamedURL(e, scheme string) (name, u string, err error) {
	name, u, ok := strings.Cut(strings.TrimSpace(e), ":")
	name, u = strings.TrimSpace(name), strings.TrimSpace(u)
	if !ok || name == "" || strings.HasPrefix(u, "//") {
		return "", "", errors.New("want NAME:" + scheme + "HOST:PORT")
	}
	if err := ValidateListenerName(name); err != nil {
		return "", "", err
	}
	pu, err := url.Parse(u)
	if err != nil {
		return "", "", err
	}
	if pu.Scheme+"://" != scheme {
		other := "TLS is on"
		if scheme == "pulsar://" {
			other = "TLS is off"
		}
		return "", "", fmt.Errorf("scheme %s://: this broker serves %s only (%s)", pu.Scheme, scheme, other)
	}
	if pu.Path != "" || pu.RawQuery != "" || pu.User != nil {
		return "", "", errors.New("want " + scheme + "HOST:PORT, nothing after the port")
	}
	if _, port, err := net.SplitHostPort(pu.Host); err != nil || port == "" {
		return "", "", fmt.Errorf("want %sHOST:PORT: %q has no port", scheme, pu.Host)
	}
	return name, scheme + pu.Host, nil
}

// ValidateListenerName accepts letters, digits, '-', '_' and '.'.
func ValidateListenerName(name string) error {
	if name == "" {
		return errors.New("empty listener name")
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return fmt.Errorf("listener name %q: want letters, digits, '-', '_' or '.'", name)
		}
	}
	return nil
}
