// Package config is the one configuration story of every Meridian role:
// a role's command-line flags are its settings, each flag has a key in
// the YAML config file ("section.key") and an environment variable
// (MERIDIAN_SECTION_KEY), and the three are laid over the flags'
// defaults in one order: flag > environment > file > default.
//
// The caller (cmd/meridian) does, per role:
//  1. register the role's flags on a pflag.FlagSet as usual;
//  2. register each group of flags inside Group(fs, SECTION, …) (or call
//     Section after registering): every flag without a key gets
//     SECTION.NAME, its name with the "SECTION-" prefix cut and dashes
//     made underscores — so a flag added later has a key, an environment
//     variable and a line in PrintTo without anyone remembering to add
//     one; then Bind the flags whose key is not derived from their name
//     (keys kept from older config files);
//  3. after the command line is parsed, ReadFile the --config file and
//     Apply it and the environment to the flag set: every flag not given
//     on the command line takes the environment's value, else the
//     file's, else keeps its default;
//  4. CheckFile and CheckEnv against the keys of every role, so a
//     mistyped key or variable is an error, not silently ignored;
//  5. validate the Effective configuration (Rules) before starting, with
//     errors that name the key, its value and where it came from.
//
// The package is pure: it reads no file but the one named to ReadFile,
// and takes the environment as an argument.
package config

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/spf13/pflag"
	"gopkg.in/yaml.v3"
)

// EnvPrefix starts every environment variable of a config key. The word
// after it is the key's section (or, for a top-level key, the key):
// MERIDIAN_BROKER_LISTEN_ADDR is broker.listen_addr. Variables of other
// purposes (MERIDIAN_TEST_*, MERIDIAN_FAULT_*, MERIDIAN_PPROF_DIR, …) must
// start with a word that is no section (cmd/meridian tests this).
const EnvPrefix = "MERIDIAN_"

// Flag annotations carrying a flag's keys.
const (
	annKey     = "meridian.config/key"     // [key, older keys of the same setting...]
	annUnbound = "meridian.config/unbound" // a flag that is no setting (--config, --help)
)

// Bind names flag's key and, after it, older keys the file may still use
// for the same setting (read when the key itself is absent). It panics if
// the flag does not exist: a wiring mistake.
func Bind(fs *pflag.FlagSet, flag, key string, older ...string) {
	if fs.Lookup(flag) == nil {
		panic(fmt.Sprintf("config: Bind of unknown flag --%s", flag))
	}
	_ = fs.SetAnnotation(flag, annKey, append([]string{key}, older...))
}

// Unbound marks flags that are not settings (--config, --print-config).
func Unbound(fs *pflag.FlagSet, flags ...string) {
	for _, f := range flags {
		if fs.Lookup(f) == nil {
			panic(fmt.Sprintf("config: Unbound of unknown flag --%s", f))
		}
		_ = fs.SetAnnotation(f, annUnbound, []string{"true"})
	}
}

// Section gives every flag of fs without a key the key SECTION.NAME
// (NAME: the flag's name without a "SECTION-" prefix, dashes as
// underscores). An empty section makes top-level keys.
func Section(fs *pflag.FlagSet, section string) {
	fs.VisitAll(func(f *pflag.Flag) {
		if len(Keys(f)) == 0 && IsSetting(f) {
			Bind(fs, f.Name, derivedKey(section, f.Name))
		}
	})
}

// derivedKey is SECTION.NAME for a flag: its name without a "SECTION-"
// prefix, dashes as underscores.
func derivedKey(section, flag string) string {
	name := strings.ReplaceAll(strings.TrimPrefix(flag, section+"-"), "-", "_")
	if section == "" {
		return name
	}
	return section + "." + name
}

func isUnbound(f *pflag.Flag) bool {
	_, ok := f.Annotations[annUnbound]
	return ok
}

// Key returns the flag's key ("" for a flag that is no setting).
func Key(f *pflag.Flag) string {
	if k := f.Annotations[annKey]; len(k) > 0 {
		return k[0]
	}
	return ""
}

// Keys returns the flag's key and its older keys.
func Keys(f *pflag.Flag) []string { return f.Annotations[annKey] }

// IsSetting reports whether f should carry a key (every flag but help and
// those marked Unbound).
func IsSetting(f *pflag.Flag) bool { return f.Name != "help" && !isUnbound(f) }

// EnvName is key's environment variable: broker.listen_addr →
// MERIDIAN_BROKER_LISTEN_ADDR.
func EnvName(key string) string {
	return EnvPrefix + strings.ToUpper(strings.NewReplacer(".", "_", "-", "_").Replace(key))
}

// SectionWord is the word after EnvPrefix in every variable of key's
// section: "BROKER" for broker.listen_addr, "REGION" for region.
func SectionWord(key string) string {
	s, _, _ := strings.Cut(key, ".")
	return strings.ToUpper(s)
}

// IsSecret reports whether key's value is secret material that PrintTo
// masks: a key (gossip.key, security.token_secret_key, …), a secret, a
// password or a token — but not a file naming one (…_file), whose path is
// no secret.
func IsSecret(key string) bool {
	last := key[strings.LastIndex(key, ".")+1:]
	if strings.HasSuffix(last, "_file") {
		return false
	}
	words := strings.Split(last, "_")
	return last == "token" || slices.Contains(words, "key") || slices.Contains(words, "secret") || slices.Contains(words, "password")
}

// Mask is how PrintTo shows a secret value: empty stays empty (so that
// "not set" shows), a file:// URL stays (a path is no secret), anything
// else is hidden.
func Mask(v string) string {
	if v == "" || strings.HasPrefix(v, "file://") {
		return v
	}
	return "******"
}

// File is a config file flattened to keys: nested mappings join with
// ".", a sequence of scalars is one comma-separated value (as the flags
// take lists).
type File struct {
	// Path is the file's name as given ("" when no file).
	Path string
	vals map[string]fileValue
}

type fileValue struct {
	v    string
	line int
}

// ReadFile reads and flattens the YAML file at path; "" is no file.
func ReadFile(path string) (*File, error) {
	if path == "" {
		return &File{vals: map[string]fileValue{}}, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return ParseFile(path, b)
}

// ParseFile flattens YAML data read from path.
func ParseFile(path string, data []byte) (*File, error) {
	f := &File{Path: path, vals: map[string]fileValue{}}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	if doc.Kind == 0 { // empty file
		return f, nil
	}
	root := doc.Content[0]
	if root.Kind == yaml.ScalarNode && root.Tag == "!!null" {
		return f, nil
	}
	if root.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("config %s: line %d: want a mapping of sections", path, root.Line)
	}
	if err := f.flatten("", root); err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	return f, nil
}

func (f *File) flatten(prefix string, n *yaml.Node) error {
	for n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i].Value
			if k == "<<" {
				return fmt.Errorf("line %d: merge keys (<<) are not supported", n.Content[i].Line)
			}
			if prefix != "" {
				k = prefix + "." + k
			}
			if _, dup := f.vals[k]; dup {
				return fmt.Errorf("line %d: %s given twice", n.Content[i].Line, k)
			}
			if err := f.flatten(k, n.Content[i+1]); err != nil {
				return err
			}
		}
	case yaml.SequenceNode:
		var parts []string
		for _, c := range n.Content {
			for c.Kind == yaml.AliasNode {
				c = c.Alias
			}
			if c.Kind != yaml.ScalarNode {
				return fmt.Errorf("line %d: %s: want a list of plain values", c.Line, prefix)
			}
			parts = append(parts, c.Value)
		}
		f.vals[prefix] = fileValue{strings.Join(parts, ","), n.Line}
	case yaml.ScalarNode:
		if n.Tag == "!!null" {
			return nil // "key:" with no value: as if absent
		}
		f.vals[prefix] = fileValue{n.Value, n.Line}
	}
	return nil
}

// Keys returns the file's keys, sorted.
func (f *File) Keys() []string {
	ks := make([]string, 0, len(f.vals))
	for k := range f.vals {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// Get returns key's value in the file.
func (f *File) Get(key string) (string, bool) {
	v, ok := f.vals[key]
	return v.v, ok
}

// CheckFile returns an error naming every key of the file that no role
// knows (known: the keys, older keys included, of every role, since one
// file may serve several roles).
func CheckFile(f *File, known map[string]bool) error {
	var errs []error
	for _, k := range f.Keys() {
		if !known[k] {
			errs = append(errs, fmt.Errorf("config %s: line %d: unknown key %s", f.Path, f.vals[k].line, k))
		}
	}
	return errors.Join(errs...)
}

// CheckEnv returns an error naming every variable of environ (os.Environ's
// form) that lies in a config section's namespace — MERIDIAN_ followed by
// the section word of a known key — but names no known key: a mistyped
// variable is an error, not silently ignored. Other MERIDIAN_ variables
// are not looked at.
func CheckEnv(environ []string, known map[string]bool) error {
	words := map[string]bool{}
	names := map[string]bool{}
	for k := range known {
		words[SectionWord(k)] = true
		names[EnvName(k)] = true
	}
	var errs []error
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		rest, ok := strings.CutPrefix(name, EnvPrefix)
		if !ok {
			continue
		}
		w, _, _ := strings.Cut(rest, "_")
		if words[w] && !names[name] {
			errs = append(errs, fmt.Errorf("config: environment variable %s names no setting (see --print-config for the names)", name))
		}
	}
	return errors.Join(errs...)
}

// Source is where a setting's value came from.
type Source int

// Sources, lowest precedence first.
const (
	Default Source = iota
	FromFile
	FromEnv
	FromFlag
)

func (s Source) String() string {
	return [...]string{"default", "file", "env", "flag"}[s]
}

// Setting is one setting's effective value.
type Setting struct {
	Key  string // broker.listen_addr
	Flag string // listen (without dashes)
	Env  string // MERIDIAN_BROKER_LISTEN_ADDR
	// Value as the flag holds it (a list comma-separated).
	Value  string
	Source Source
	// From says which: the file's path and the key read (an older key
	// when that one was), the variable, or the flag.
	From string
}

// Effective is a role's effective configuration, in key order.
type Effective struct {
	Settings []Setting
	byKey    map[string]int
}

// Get returns key's setting.
func (e *Effective) Get(key string) (Setting, bool) {
	i, ok := e.byKey[key]
	if !ok {
		return Setting{}, false
	}
	return e.Settings[i], true
}

// Given reports whether key was set by a flag, the environment or the
// file (not left at its default).
func (e *Effective) Given(key string) bool {
	s, ok := e.Get(key)
	return ok && s.Source != Default
}

// Errorf is an error about key's value that names the key, its value
// (masked if secret) and where it came from:
// `broker.write_quorum=5 (file bad.yaml): …`.
func (e *Effective) Errorf(key, format string, args ...any) error {
	s, ok := e.Get(key)
	if !ok {
		return fmt.Errorf("config %s: "+format, append([]any{key}, args...)...)
	}
	v := s.Value
	if IsSecret(key) {
		v = Mask(v)
	}
	return fmt.Errorf("config %s=%q (%s): %s", key, v, s.describe(), fmt.Sprintf(format, args...))
}

func (s Setting) describe() string {
	switch s.Source {
	case FromFlag:
		return "flag --" + s.Flag
	case FromEnv:
		return "env " + s.Env
	case FromFile:
		return "file " + s.From
	}
	return "default; flag --" + s.Flag + ", env " + s.Env
}

// Apply lays the environment and the file under the command line: every
// setting of fs not given as a flag takes env's value (env is
// os.LookupEnv or a test's map), else the file's (its key, else the
// first of its older keys present), else keeps its default. It returns
// the effective configuration. A flag without a key is an error (a
// wiring mistake: see Section), as is a value its flag refuses and a
// file giving a key and an older key different values.
func Apply(fs *pflag.FlagSet, file *File, env func(string) (string, bool)) (*Effective, error) {
	if file == nil {
		file = &File{vals: map[string]fileValue{}}
	}
	var errs []error
	e := &Effective{byKey: map[string]int{}}
	fs.VisitAll(func(f *pflag.Flag) {
		if !IsSetting(f) {
			return
		}
		keys := Keys(f)
		if len(keys) == 0 {
			errs = append(errs, fmt.Errorf("config: flag --%s has no config key (config.Section or config.Bind it)", f.Name))
			return
		}
		s := Setting{Key: keys[0], Flag: f.Name, Env: EnvName(keys[0])}
		var val string
		switch {
		case f.Changed:
			s.Source, s.From = FromFlag, "--"+f.Name
		default:
			if v, ok := env(s.Env); ok {
				s.Source, s.From, val = FromEnv, s.Env, v
				break
			}
			for _, k := range keys {
				if v, ok := file.vals[k]; ok {
					if s.Source == FromFile {
						if prev, _ := file.Get(keys[0]); prev != v.v {
							errs = append(errs, fmt.Errorf("config %s: line %d: %s=%q disagrees with %s=%q (the same setting; keep %s)", file.Path, v.line, k, v.v, keys[0], prev, keys[0]))
						}
						continue
					}
					s.Source, s.From, val = FromFile, file.Path, v.v
					if k != keys[0] {
						s.From += " (older key " + k + ")"
					}
				}
			}
		}
		if s.Source == FromEnv || s.Source == FromFile {
			if err := set(f, val); err != nil {
				v := val
				if IsSecret(s.Key) {
					v = Mask(v)
				}
				errs = append(errs, fmt.Errorf("config %s=%q (%s): %v", s.Key, v, s.describe(), err))
			}
		}
		s.Value = valueString(f)
		if _, dup := e.byKey[s.Key]; dup {
			errs = append(errs, fmt.Errorf("config: key %s bound to two flags (--%s and --%s)", s.Key, e.Settings[e.byKey[s.Key]].Flag, f.Name))
			return
		}
		e.byKey[s.Key] = len(e.Settings)
		e.Settings = append(e.Settings, s)
	})
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	slices.SortFunc(e.Settings, func(a, b Setting) int { return strings.Compare(a.Key, b.Key) })
	for i, s := range e.Settings {
		e.byKey[s.Key] = i
	}
	return e, nil
}

// set gives the flag v the way the command line would, except that a
// list replaces the default rather than appending to it.
func set(f *pflag.Flag, v string) error {
	if sv, ok := f.Value.(pflag.SliceValue); ok {
		var parts []string
		for _, p := range strings.Split(v, ",") {
			if p = strings.TrimSpace(p); p != "" {
				parts = append(parts, p)
			}
		}
		return sv.Replace(parts)
	}
	if f.Value.Type() == "bool" {
		// YAML 1.1 spellings an operator may write (yes/no/on/off).
		switch strings.ToLower(v) {
		case "yes", "on":
			v = "true"
		case "no", "off":
			v = "false"
		}
	}
	return f.Value.Set(v)
}

func valueString(f *pflag.Flag) string {
	if sv, ok := f.Value.(pflag.SliceValue); ok {
		return strings.Join(sv.GetSlice(), ",")
	}
	return f.Value.String()
}

// Group runs register, which adds flags to fs, and gives those of its
// flags that have no key yet SECTION.NAME keys (as Section). Bind after
// it to override a derived key.
func Group(fs *pflag.FlagSet, section string, register func()) {
	before := map[string]bool{}
	fs.VisitAll(func(f *pflag.Flag) { before[f.Name] = true })
	register()
	fs.VisitAll(func(f *pflag.Flag) {
		if !before[f.Name] && len(Keys(f)) == 0 && IsSetting(f) {
			Bind(fs, f.Name, derivedKey(section, f.Name))
		}
	})
}
