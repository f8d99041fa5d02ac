package main

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"strconv"
	"strings"

	"github.com/meridian-mq/meridian/internal/config"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// One configuration story for every role (issue 28): a role's flags are
// its settings; each has a key in the --config file and an environment
// variable (internal/config), and flag > environment > file > default.
// Keys kept from the config files of before are Bound explicitly; every
// other flag's key is derived from its name within its section, so a
// flag added to a role has a key and a variable without more wiring
// (TestEveryFlagOfEveryRoleIsSettable).

// ignoredKeys are keys older config files may hold that no role reads:
// accepted (the file keeps working), never applied.
var ignoredKeys = []string{
	"security.token_file", // documented for `up`, never read
}

// roleRun is a role's body, given its effective configuration (the
// flags' variables already hold it).
type roleRun func(cmd *cobra.Command, eff *config.Effective) error

// withConfig adds --config and --print-config to a role command whose
// flags are registered and bound, and makes RunE: read the file, lay
// the environment and the file under the flags, check unknown keys and
// variables, print if asked, validate, then run.
func withConfig(cmd *cobra.Command, validate func(*config.Effective) error, run roleRun) {
	var path string
	var print bool
	f := cmd.Flags()
	f.StringVar(&path, "config", "", "config file (YAML): every flag has a key in it (see --print-config); flag > environment (MERIDIAN_<SECTION>_<KEY>) > file > default")
	f.BoolVar(&print, "print-config", false, "print the effective configuration (secrets masked), with where each value came from, and exit")
	config.Unbound(f, "config", "print-config")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		eff, err := loadRoleConfig(cmd, path, os.LookupEnv, os.Environ())
		if err != nil {
			return err
		}
		if print {
			if err := eff.PrintTo(cmd.OutOrStdout(), "meridian "+cmd.Name()+": effective configuration"); err != nil {
				return err
			}
		}
		if err := validate(eff); err != nil {
			return err
		}
		if print {
			return nil
		}
		return run(cmd, eff)
	}
}

// loadRoleConfig is the pure part of withConfig's RunE (tests call it).
func loadRoleConfig(cmd *cobra.Command, path string, lookup func(string) (string, bool), environ []string) (*config.Effective, error) {
	file, err := config.ReadFile(path)
	if err != nil {
		return nil, err
	}
	known := knownKeys()
	if err := errors.Join(config.CheckFile(file, known), config.CheckEnv(environ, known)); err != nil {
		return nil, err
	}
	return config.Apply(cmd.Flags(), file, lookup)
}

// roleCommands builds every server role's command, attached to a root
// (so that they inherit --log-level). Tests use it; a running command
// must not (newRoot resets the global --log-level variable).
func roleCommands() map[string]*cobra.Command {
	root := newRoot()
	out := map[string]*cobra.Command{}
	for _, c := range root.Commands() {
		switch c.Name() {
		case "etcd", "bookie", "broker", "autorecovery", "standalone":
			c.InheritedFlags() // merges the root's persistent flags into c.Flags()
			out[c.Name()] = c
		}
	}
	return out
}

// roleConstructors build each server role's command.
func roleConstructors() []func() *cobra.Command {
	return []func() *cobra.Command{newEtcdCmd, newBookieCmd, newBrokerCmd, newAutorecoveryCmd, newStandaloneCmd}
}

// knownKeys are the keys (older ones too) of every role: one file may
// serve several roles, each reading its sections. It builds the roles'
// flag sets afresh, with no root: newRoot would reset the global
// --log-level variable the running command has parsed.
func knownKeys() map[string]bool {
	known := map[string]bool{}
	for _, k := range ignoredKeys {
		known[k] = true
	}
	var level string
	sets := []*pflag.FlagSet{pflag.NewFlagSet("root", pflag.ContinueOnError)}
	rootFlags(sets[0], &level)
	for _, ctor := range roleConstructors() {
		sets = append(sets, ctor().Flags())
	}
	for _, fs := range sets {
		fs.VisitAll(func(f *pflag.Flag) {
			for _, k := range config.Keys(f) {
				known[k] = true
			}
		})
	}
	return known
}

// validateAll joins a role's rule checks and its cross-key checks.
func validateAll(eff *config.Effective, rules map[string]config.Rule, extra ...func(*config.Effective) error) error {
	errs := []error{eff.Validate(rules)}
	for _, x := range extra {
		errs = append(errs, x(eff))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("invalid configuration:\n%w", err)
	}
	return nil
}

// Rules of the settings several roles share.
var (
	regionRules = map[string]config.Rule{
		"region":             config.Name,
		"metadata.endpoints": config.URLList(true),
		"metadata.root":      rootRule,
	}
	gossipRules = map[string]config.Rule{
		"gossip.addr":           config.HostPort(true),
		"gossip.advertise_addr": config.HostPort(true),
		"gossip.seeds":          config.HostPortList,
		"gossip.profile":        config.OneOf("meridian", "lan", "fast"),
	}
	recoveryRules = map[string]config.Rule{
		"recovery.lost_bookie_delay": config.DurationMin(0, "0: re-replicate at once"),
		"recovery.scrub_interval":    config.Positive,
		"recovery.throttle_mbps":     mbpsRule,
		"recovery.workers":           config.IntMin(1, "a process runs at least one worker"),
	}
	logRules = map[string]config.Rule{
		"log.level": func(v string) error {
			var l slog.Level
			return l.UnmarshalText([]byte(v))
		},
	}
)

func rootRule(v string) error {
	if !strings.HasPrefix(v, "/") {
		return errors.New("want an etcd key prefix starting with /")
	}
	return nil
}

func mbpsRule(v string) error {
	x, err := strconv.ParseFloat(v, 64)
	if err != nil {
		return err
	}
	if x < 0 {
		return errors.New("want MiB/s >= 0 (0: unlimited)")
	}
	return nil
}

// rules merges rule sets.
func rules(sets ...map[string]config.Rule) map[string]config.Rule {
	out := map[string]config.Rule{}
	for _, s := range sets {
		maps.Copy(out, s)
	}
	return out
}

// Rules of the ledger quorums, where a role sets them.
func quorumCheck(eff *config.Effective) error {
	get := func(k string) int {
		s, _ := eff.Get(k)
		n, _ := strconv.Atoi(s.Value)
		return n
	}
	e, qw, qa := get("broker.ensemble_size"), get("broker.write_quorum"), get("broker.ack_quorum")
	if err := config.Quorums(e, qw, qa); err != nil {
		// Name the key that breaks the chain E >= Qw >= Qa >= 1.
		key := "broker.ack_quorum"
		if qa >= 1 && qw >= qa {
			key = "broker.write_quorum"
			if eff.Given("broker.ensemble_size") && !eff.Given("broker.write_quorum") {
				key = "broker.ensemble_size"
			}
		}
		return eff.Errorf(key, "%v (broker.ensemble_size=%d, broker.write_quorum=%d, broker.ack_quorum=%d)", err, e, qw, qa)
	}
	return nil
}
