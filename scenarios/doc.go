// Package scenarios holds the drill files `meridian drill` ships with
// (YAML; the format is drill.Scenario's). They are embedded in the binary,
// so `meridian drill NAME` runs one without a checkout; `meridian drill
// --list` lists them.
package scenarios

import (
	"embed"
	"io/fs"
	"sort"
	"strings"
)

// Files holds every *.yaml of this directory.
//
//go:embed *.yaml
var Files embed.FS

// Names lists the shipped drills.
func Names() ([]string, error) {
	es, err := fs.ReadDir(Files, ".")
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range es {
		if n, ok := strings.CutSuffix(e.Name(), ".yaml"); ok {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out, nil
}
