package config

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"
)

// A Rule checks one setting's value (Setting.Value) and says what is
// wrong with it; Validate names the key, the value and its source.
type Rule func(v string) error

// Validate applies each key's rule and returns every failure. A rule for
// a key the role does not have is an error too (a renamed key must not
// silently lose its check).
func (e *Effective) Validate(rules map[string]Rule) error {
	keys := make([]string, 0, len(rules))
	for k := range rules {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var errs []error
	for _, k := range keys {
		s, ok := e.Get(k)
		if !ok {
			errs = append(errs, fmt.Errorf("config: a rule for %s, which this role has not", k))
			continue
		}
		if err := rules[k](s.Value); err != nil {
			errs = append(errs, e.Errorf(k, "%v", err))
		}
	}
	return errors.Join(errs...)
}

// Quorums checks a ledger's ensemble size, write quorum and ack quorum:
// E >= Qw >= Qa >= 1 (BookKeeper's rule). Whether the region has E live
// bookies is not checked: that is a readiness and ledger-creation
// matter, not a start-up one.
func Quorums(e, qw, qa int) error {
	switch {
	case qa < 1:
		return fmt.Errorf("ack quorum %d: at least 1 bookie must acknowledge", qa)
	case qw < qa:
		return fmt.Errorf("write quorum %d < ack quorum %d: cannot wait for more acknowledgements than writes (want E >= Qw >= Qa >= 1)", qw, qa)
	case e < qw:
		return fmt.Errorf("ensemble size %d < write quorum %d: an entry cannot go to more bookies than the ensemble has (want E >= Qw >= Qa >= 1)", e, qw)
	}
	return nil
}

// DurationMin accepts durations >= min (a duration flag's value).
func DurationMin(min time.Duration, why string) Rule {
	return func(v string) error {
		d, err := time.ParseDuration(v)
		if err != nil {
			return err
		}
		if d < min {
			return fmt.Errorf("want a duration >= %s (%s)", min, why)
		}
		return nil
	}
}

// Positive accepts durations > 0.
var Positive Rule = func(v string) error {
	d, err := time.ParseDuration(v)
	if err != nil {
		return err
	}
	if d <= 0 {
		return errors.New("want a duration > 0")
	}
	return nil
}

// AnyDuration accepts every duration (negative and 0 have meanings).
var AnyDuration Rule = func(v string) error {
	_, err := time.ParseDuration(v)
	return err
}

// IntMin accepts integers >= min.
func IntMin(min int, why string) Rule {
	return func(v string) error {
		n, err := strconv.Atoi(v)
		if err != nil {
			return err
		}
		if n < min {
			return fmt.Errorf("want >= %d (%s)", min, why)
		}
		return nil
	}
}

// IntRange accepts integers in [min, max].
func IntRange(min, max int, why string) Rule {
	return func(v string) error {
		n, err := strconv.Atoi(v)
		if err != nil {
			return err
		}
		if n < min || n > max {
			return fmt.Errorf("want %d to %d (%s)", min, max, why)
		}
		return nil
	}
}

// Port accepts a port number 0-65535 (0: any free port).
var Port Rule = func(v string) error {
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("want a port 0-65535")
	}
	return nil
}

// HostPort accepts host:port with a port 0-65535; with optional, also "".
func HostPort(optional bool) Rule {
	return func(v string) error {
		if v == "" {
			if optional {
				return nil
			}
			return errors.New("want host:port")
		}
		return checkHostPort(v)
	}
}

func checkHostPort(v string) error {
	host, port, err := net.SplitHostPort(v)
	if err != nil {
		return fmt.Errorf("want host:port: %v", err)
	}
	if strings.ContainsAny(host, " /") {
		return fmt.Errorf("host %q: not a host name or address", host)
	}
	if err := Port(port); err != nil {
		return fmt.Errorf("port %q: want 0-65535", port)
	}
	return nil
}

// HostPortList accepts a comma-separated list of host:port (empty too).
var HostPortList Rule = func(v string) error {
	for _, p := range strings.Split(v, ",") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		if err := checkHostPort(p); err != nil {
			return fmt.Errorf("%s: %v", p, err)
		}
	}
	return nil
}

// URL accepts an http:// or https:// URL with a host:port; with optional,
// also "".
func URL(optional bool) Rule {
	return func(v string) error {
		if v == "" && optional {
			return nil
		}
		return checkURL(v)
	}
}

func checkURL(v string) error {
	u, err := url.Parse(v)
	if err != nil {
		return err
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("%s: want an http:// or https:// URL", v)
	}
	if err := checkHostPort(u.Host); err != nil {
		return fmt.Errorf("%s: %v", v, err)
	}
	return nil
}

// URLList accepts comma-separated URLs, each optionally prefixed by
// NAME= (the global store's members: REGION=URL); with nonEmpty, at
// least one.
func URLList(nonEmpty bool) Rule {
	return func(v string) error {
		n := 0
		for _, p := range strings.Split(v, ",") {
			if p = strings.TrimSpace(p); p == "" {
				continue
			}
			n++
			if name, u, ok := strings.Cut(p, "="); ok && !strings.Contains(name, "://") {
				if err := Name(name); err != nil {
					return fmt.Errorf("%s: region %v", p, err)
				}
				p = u
			}
			if err := checkURL(p); err != nil {
				return err
			}
		}
		if nonEmpty && n == 0 {
			return errors.New("want at least one URL")
		}
		return nil
	}
}

// Name accepts a region or rack name: 1-63 letters, digits, '-', '_' or
// '.', starting and ending with a letter or digit. Names are etcd key
// components (ROOT/regions/REGION), gossip tags and metric labels, so no
// '/', space or ':'.
var Name Rule = func(v string) error {
	if v == "" {
		return errors.New("want a name (letters, digits, '-', '_', '.')")
	}
	if len(v) > 63 {
		return errors.New("longer than 63 characters")
	}
	for i, r := range v {
		alnum := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9'
		if !alnum && (i == 0 || i == len(v)-1 || (r != '-' && r != '_' && r != '.')) {
			return fmt.Errorf("character %q at %d: want letters, digits and '-', '_', '.' inside", r, i)
		}
	}
	return nil
}

// OptionalName is Name or "".
var OptionalName Rule = func(v string) error {
	if v == "" {
		return nil
	}
	return Name(v)
}

// OneOf accepts one of the values.
func OneOf(values ...string) Rule {
	return func(v string) error {
		for _, x := range values {
			if v == x {
				return nil
			}
		}
		return fmt.Errorf("want one of %s", strings.Join(values, ", "))
	}
}

// NonEmpty accepts any value but "".
var NonEmpty Rule = func(v string) error {
	if v == "" {
		return errors.New("want a value")
	}
	return nil
}
