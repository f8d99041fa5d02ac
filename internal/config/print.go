package config

import (
	"fmt"
	"io"
	"strings"

	"gopkg.in/yaml.v3"
)

// PrintTo writes the effective configuration as a YAML config file, each
// value followed by a comment saying where it came from, its flag and its
// environment variable; secret values are masked (IsSecret, Mask). With
// the masked values filled in, the output is a config file for the role.
func (e *Effective) PrintTo(w io.Writer, title string) error {
	root := &yaml.Node{Kind: yaml.MappingNode}
	// Top-level keys (region) first, then the sections.
	for pass := range 2 {
		for _, s := range e.Settings {
			if strings.Contains(s.Key, ".") != (pass == 1) {
				continue
			}
			v := s.Value
			if IsSecret(s.Key) {
				v = Mask(v)
			}
			val := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: v}
			if v != "" && !needsQuotes(v) {
				val.Tag = "" // plain: 10s, 3, true, 127.0.0.1:6650
			}
			val.LineComment = fmt.Sprintf("%s · --%s · %s", sourceNote(s), s.Flag, s.Env)
			insert(root, strings.Split(s.Key, "."), val)
		}
	}
	doc := &yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{root},
		HeadComment: title + "\nPrecedence: flag > environment > file > default. Secrets are masked."}
	enc := yaml.NewEncoder(w)
	enc.SetIndent(2)
	if err := enc.Encode(doc); err != nil {
		return err
	}
	return enc.Close()
}

func sourceNote(s Setting) string {
	switch s.Source {
	case FromFile:
		return "file " + s.From
	case FromEnv:
		return "env"
	case FromFlag:
		return "flag"
	}
	return "default"
}

// needsQuotes: values YAML would read back as something else than the
// string (a null, a bool spelled oddly, a number with leading zeros…) —
// printed quoted so the output reads back the same.
func needsQuotes(v string) bool {
	var n yaml.Node
	if err := yaml.Unmarshal([]byte(v), &n); err != nil || len(n.Content) != 1 {
		return true
	}
	c := n.Content[0]
	return c.Kind != yaml.ScalarNode || c.Value != v || c.Tag == "!!null"
}

// insert puts val at path in the mapping m, creating sub-mappings.
func insert(m *yaml.Node, path []string, val *yaml.Node) {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == path[0] {
			if len(path) > 1 {
				insert(m.Content[i+1], path[1:], val)
			}
			return
		}
	}
	k := &yaml.Node{Kind: yaml.ScalarNode, Value: path[0]}
	if len(path) == 1 {
		m.Content = append(m.Content, k, val)
		return
	}
	sub := &yaml.Node{Kind: yaml.MappingNode}
	m.Content = append(m.Content, k, sub)
	insert(sub, path[1:], val)
}
