package broker

import (
	"errors"
	"net"
	"strings"

	"github.com/meridian-mq/meridian/broker/meta"
)

// Advertised listeners (meta/listeners.go): the broker's named URLs, the
// internal one its registration's ServiceURL (what other brokers and
// clients naming no listener get), and the further sockets bound for a
// listener (Config.BindAddresses).
//
// Which listener a connection's client uses decides the URLs it is sent:
// a LOOKUP names it (advertised_listener_name) or not (the internal one,
// or the listener of the socket it arrived on); the connection remembers
// the last, so a CLOSE_PRODUCER/CLOSE_CONSUMER of a hand-off names the new
// owner in the same listener — and names no owner (the client looks up
// again, naming its listener) while the connection's listener is unknown
// and the broker has named listeners.
type listenerSet struct {
	byName   meta.Listeners     // nil: no listeners configured
	http     meta.HTTPListeners // their http:// and https:// URLs (nil: none)
	internal string             // the internal listener's name ("" without listeners)
	binds    []meta.BindAddress
	bound    []net.Listener // the sockets of binds, once Start listened
}

// newListenerSet parses the config's listeners for the scheme the
// broker serves.
func newListenerSet(c Config, scheme string) (listenerSet, error) {
	ls, internal, err := meta.ParseAdvertisedListeners(c.AdvertisedListeners, c.InternalListenerName, scheme)
	if err != nil {
		return listenerSet{}, err
	}
	hl, err := meta.ParseHTTPListeners(c.AdvertisedListeners, ls)
	if err != nil {
		return listenerSet{}, err
	}
	binds, err := meta.ParseBindAddresses(c.BindAddresses, ls, scheme)
	if err != nil {
		return listenerSet{}, err
	}
	return listenerSet{byName: ls, http: hl, internal: internal, binds: binds}, nil
}

// internalAddr is the internal listener's host:port ("" without
// listeners): the address the broker is known by.
func (l *listenerSet) internalAddr(scheme string) string {
	if l.byName == nil {
		return ""
	}
	return strings.TrimPrefix(l.byName[l.internal], scheme)
}

func (l *listenerSet) close() {
	for _, lis := range l.bound {
		lis.Close()
	}
}

// urlFor is bi's URL in listener name ("": its internal URL).
func (bi BrokerInfo) urlFor(name string) (string, error) {
	return meta.Listeners(bi.Listeners).URLFor(bi.ServiceURL, name)
}

// lookupListener is the listener a LOOKUP on c is answered in: the one it
// names, else the one of the socket it arrived on; "" is the internal
// one. The connection remembers it (assignedURL).
func (c *conn) lookupListener(named string) string {
	name := named
	if name == "" {
		name = c.bindListener
	}
	if name == c.b.lst.internal {
		name = ""
	}
	c.mu.Lock()
	c.listener, c.listenerKnown = name, true
	c.mu.Unlock()
	return name
}

// assignedURL is the URL of target (a bundle's new owner) to send this
// connection's client in a CLOSE_PRODUCER/CLOSE_CONSUMER, in the listener
// it uses: "" (no assigned URL: the client looks up again) for no target,
// or when the broker has named listeners and the connection's is not
// known, or target lacks it.
func (c *conn) assignedURL(target *BrokerInfo) string {
	if target == nil {
		return ""
	}
	c.mu.Lock()
	name, known := c.listener, c.listenerKnown
	c.mu.Unlock()
	if !known {
		if c.bindListener == "" && c.b.lst.byName != nil {
			return ""
		}
		name = c.bindListener
		if name == c.b.lst.internal {
			name = ""
		}
	}
	u, err := target.urlFor(name)
	if err != nil {
		return ""
	}
	return u
}

// errListenersAndAdvertise: Pulsar's rule, advertisedListeners and
// advertisedAddress never together.
var errListenersAndAdvertise = errors.New("broker: AdvertisedAddr and AdvertisedListeners must not be set together (the internal listener is the advertised address)")
