package config

import (
	"bytes"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// WriteDoc lists every setting of every role with its key, flag,
// variable, default and help; listeners also in the ports table; a
// pipe in a help text does not break the table.
func TestWriteDocListsEverySetting(t *testing.T) {
	fs := pflag.NewFlagSet("relay", pflag.ContinueOnError)
	Group(fs, "relay", func() {
		fs.String("listen", "127.0.0.1:6650", "Pulsar protocol listen address")
		fs.Int("max-things", 3, "things | at most")
		fs.StringSlice("seeds-list", nil, "a list")
	})
	Bind(fs, "listen", "relay.listen_addr", "relay.old_listen")
	var b bytes.Buffer
	if err := WriteDoc(&b, []Role{{Name: "relay", Short: "Run a relay", Flags: fs}}); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"| relay | `relay.listen_addr` | `--listen` | `127.0.0.1:6650` |",
		"| `relay.listen_addr` | `--listen` | `MERIDIAN_RELAY_LISTEN_ADDR` | `127.0.0.1:6650` | Pulsar protocol listen address (older keys: `relay.old_listen`) |",
		"| `relay.max_things` | `--max-things` | `MERIDIAN_RELAY_MAX_THINGS` | `3` | things \\| at most |",
		"| `relay.seeds_list` | `--seeds-list` | `MERIDIAN_RELAY_SEEDS_LIST` | (empty) | a list |",
		"## relay\n\nRun a relay.\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
	if strings.Contains(out, "| relay | `relay.max_things`") {
		t.Error("a count is in the ports table")
	}
}
