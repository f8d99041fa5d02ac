package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Requirement (issue 28, section 6): every unit in deploy/systemd starts
// its role with a --config file, and with the example file of that name
// (deploy/systemd/etc) the role's flags parse and the configuration
// validates (`meridian ROLE --config FILE --print-config`, in-process).
// A template unit (meridian-etcd@.service) is checked for each example
// its %i names (etcd-region.yaml, etcd-global.yaml).
func TestSystemdUnitsStartTheirRoles(t *testing.T) {
	const dir = "../../deploy/systemd"
	units, _ := filepath.Glob(filepath.Join(dir, "*.service"))
	if len(units) < 5 {
		t.Fatalf("%d units in %s, want one per role", len(units), dir)
	}
	seen := map[string]bool{}
	for _, u := range units {
		b, err := os.ReadFile(u)
		if err != nil {
			t.Fatal(err)
		}
		unit := string(b)
		var exec string
		for _, l := range strings.Split(unit, "\n") {
			if v, ok := strings.CutPrefix(l, "ExecStart="); ok {
				exec = v
			}
		}
		for _, want := range []string{"[Install]", "User=meridian", "Restart=on-failure", "ReadWritePaths=/var/lib/meridian"} {
			if !strings.Contains(unit, want) {
				t.Errorf("%s: no %s", u, want)
			}
		}
		args := strings.Fields(exec)
		if len(args) < 4 || args[0] != "/usr/local/bin/meridian" || args[2] != "--config" {
			t.Errorf("%s: ExecStart=%q: want /usr/local/bin/meridian ROLE --config FILE", u, exec)
			continue
		}
		role := args[1]
		if _, ok := roleCommands()[role]; !ok {
			t.Errorf("%s: %q is no role", u, role)
			continue
		}
		seen[role] = true
		instances := []string{""}
		if strings.Contains(u, "@") {
			ex, _ := filepath.Glob(filepath.Join(dir, "etc", role+"-*.yaml"))
			instances = nil
			for _, e := range ex {
				instances = append(instances, strings.TrimSuffix(strings.TrimPrefix(filepath.Base(e), role+"-"), ".yaml"))
			}
			if len(instances) == 0 {
				t.Errorf("%s: no example %s-INSTANCE.yaml", u, role)
			}
		}
		for _, inst := range instances {
			a := append([]string{}, args[1:]...)
			for i := range a {
				a[i] = strings.ReplaceAll(a[i], "%i", inst)
				if p, ok := strings.CutPrefix(a[i], "/etc/meridian/"); ok {
					a[i] = filepath.Join(dir, "etc", p)
				}
			}
			out, err := runRole(t, append(a, "--print-config")...)
			if err != nil {
				t.Errorf("%s (%s): meridian %s --print-config: %v", u, inst, strings.Join(a, " "), err)
				continue
			}
			if !strings.Contains(out, "# file "+a[2]) {
				t.Errorf("%s (%s): no setting came from %s:\n%s", u, inst, a[2], out)
			}
		}
	}
	for _, r := range []string{"etcd", "bookie", "broker", "autorecovery", "standalone"} {
		if !seen[r] {
			t.Errorf("no unit runs %s", r)
		}
	}
}
