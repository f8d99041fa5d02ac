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
//
// As Pulsar's, a listener may also name its web service URLs, one
// http:// and one https:// at most (internal:http://10.0.0.5:8080,
// external:https://broker-1.example.com:8443): an HTTP lookup in that
// listener answers them as its httpUrl and httpUrlTls, and an admin call
// redirected to a topic's owner is sent to the owner's URL in the
// caller's listener. A listener naming neither answers the broker's own
// admin URL. Either scheme is taken whatever the broker's TLS (a load
// balancer in front may terminate TLS).

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
		if isHTTPEntry(e) {
			continue // ParseHTTPListeners
		}
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
	if len(ls) == 0 {
		return nil, "", fmt.Errorf("advertised listeners %q: no %sHOST:PORT (every listener needs one; http:// and https:// URLs only add to it)", strings.Join(entries, ","), scheme)
	}
	if internal == "" {
		internal = first
	}
	if _, ok := ls[internal]; !ok {
		return nil, "", fmt.Errorf("internal listener %q is none of the advertised listeners", internal)
	}
	return ls, internal, nil
}

// HTTPURLs are a listener's web service URLs (Pulsar's brokerHttpUrl and
// brokerHttpsUrl): http://HOST:PORT and https://HOST:PORT, "" when not
// given.
type HTTPURLs struct {
	HTTP  string `json:"http,omitempty"`
	HTTPS string `json:"https,omitempty"`
}

// HTTPListeners maps a listener name to its web service URLs; a listener
// without any is absent.
type HTTPListeners map[string]HTTPURLs

// URLFor is the web service URL of listener name to send a client to
// (tls: the client came over TLS, https preferred; else http preferred),
// or ok false when the listener names none ("" names none: the internal
// one answers the broker's admin URL).
func (hl HTTPListeners) URLFor(name string, tls bool) (u string, ok bool) {
	h, ok := hl[name]
	if !ok || name == "" {
		return "", false
	}
	first, second := h.HTTP, h.HTTPS
	if tls {
		first, second = h.HTTPS, h.HTTP
	}
	if first != "" {
		return first, true
	}
	return second, second != ""
}

// isHTTPEntry is whether an advertised listener entry names an http://
// or https:// URL.
func isHTTPEntry(e string) bool {
	_, u, _ := strings.Cut(strings.TrimSpace(e), ":")
	u = strings.TrimSpace(u)
	return strings.HasPrefix(u, "http://") || strings.HasPrefix(u, "https://")
}

// ParseHTTPListeners reads the http:// and https:// entries of
// advertisedListeners (NAME:http://HOST:PORT, NAME:https://HOST:PORT;
// the others are ParseAdvertisedListeners'): each NAME one of ls, at
// most one URL of each scheme per listener, no host:port given twice.
// None: nil.
func ParseHTTPListeners(entries []string, ls Listeners) (HTTPListeners, error) {
	var out HTTPListeners
	byHost := map[string]string{}
	var errs []error
	for _, e := range entries {
		if !isHTTPEntry(e) {
			continue
		}
		scheme := "http://"
		if _, u, _ := strings.Cut(strings.TrimSpace(e), ":"); strings.HasPrefix(strings.TrimSpace(u), "https://") {
			scheme = "https://"
		}
		name, u, err := parseNamedURL(e, scheme)
		if err != nil {
			errs = append(errs, fmt.Errorf("advertised listener %q: %w", e, err))
			continue
		}
		if _, ok := ls[name]; !ok {
			errs = append(errs, fmt.Errorf("advertised listener %q: listener %s has no pulsar URL (an %s URL adds to a listener's pulsar URL)", e, name, scheme))
			continue
		}
		h := out[name]
		slot := &h.HTTP
		if scheme == "https://" {
			slot = &h.HTTPS
		}
		if *slot != "" {
			errs = append(errs, fmt.Errorf("advertised listener %q: listener %s has an %s URL already (one per listener)", e, name, scheme))
			continue
		}
		hp := strings.TrimPrefix(u, scheme)
		if other, ok := byHost[hp]; ok {
			errs = append(errs, fmt.Errorf("advertised listener %q: %s is listener %s's web service address already (one address per URL)", e, hp, other))
			continue
		}
		byHost[hp] = name
		*slot = u
		if out == nil {
			out = HTTPListeners{}
		}
		out[name] = h
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return out, nil
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
