package main

import (
	"github.com/meridian-mq/meridian/broker"
	"github.com/meridian-mq/meridian/broker/meta"
	"github.com/meridian-mq/meridian/internal/config"
	"github.com/spf13/pflag"
)

// listenerFlags are a broker's advertised listeners (Pulsar's
// advertisedListeners, internalListenerName and bindAddresses; see
// broker/meta/listeners.go), in the broker section.
type listenerFlags struct {
	advertised []string
	internal   string
	bind       []string
}

func (l *listenerFlags) register(f *pflag.FlagSet) {
	f.StringSliceVar(&l.advertised, "advertised-listeners", nil, "named listeners advertised to clients, NAME:pulsar://HOST:PORT each (pulsar+ssl:// with TLS), comma-separated, as Pulsar's advertisedListeners (internal:pulsar://10.0.0.5:6650,external:pulsar://broker-1.example.com:6652): a client naming one (ListenerName) is sent the brokers' URLs of that name, one naming a listener they lack gets ServiceNotReady; a listener may add one NAME:http://HOST:PORT and one NAME:https://HOST:PORT, its web service URLs, answered by an HTTP lookup in it and used by admin redirects to a topic's owner (a listener without: the admin address); not with --advertise (default: one unnamed listener, the advertised address)")
	f.StringVar(&l.internal, "internal-listener-name", "", "the listener other brokers, other regions and clients naming no listener are given (default: the first of --advertised-listeners)")
	f.StringSliceVar(&l.bind, "bind-addresses", nil, "further Pulsar protocol sockets, NAME:pulsar://HOST:PORT each (Pulsar's bindAddresses), NAME one of --advertised-listeners: a lookup arriving on one without a listener name is answered in listener NAME")
}

func (l listenerFlags) apply(c *broker.Config) {
	c.AdvertisedListeners, c.InternalListenerName, c.BindAddresses = l.advertised, l.internal, l.bind
}

// listenerCheck validates the listener keys together (the scheme follows
// TLS: security.tls.cert_file, or standalone.tls), naming the key at fault.
func listenerCheck(eff *config.Effective) error {
	get := func(k string) string { s, _ := eff.Get(k); return s.Value }
	scheme := "pulsar://"
	if get("security.tls.cert_file") != "" || get("standalone.tls") == "true" {
		scheme = "pulsar+ssl://"
	}
	ls, _, err := meta.ParseAdvertisedListeners(splitList(get("broker.advertised_listeners")), get("broker.internal_listener_name"), scheme)
	if err != nil {
		key := "broker.advertised_listeners"
		if eff.Given("broker.internal_listener_name") && get("broker.advertised_listeners") != "" {
			if _, _, e := meta.ParseAdvertisedListeners(splitList(get("broker.advertised_listeners")), "", scheme); e == nil {
				key = "broker.internal_listener_name"
			}
		}
		return eff.Errorf(key, "%v", err)
	}
	if _, err := meta.ParseHTTPListeners(splitList(get("broker.advertised_listeners")), ls); err != nil {
		return eff.Errorf("broker.advertised_listeners", "%v", err)
	}
	if get("broker.advertised_addr") != "" && len(ls) > 0 {
		return eff.Errorf("broker.advertised_addr", "not with broker.advertised_listeners (as Pulsar: the internal listener is the advertised address)")
	}
	if _, err := meta.ParseBindAddresses(splitList(get("broker.bind_addresses")), ls, scheme); err != nil {
		return eff.Errorf("broker.bind_addresses", "%v", err)
	}
	return nil
}
