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
	fs := pflag.NewFlagSet("broker", pflag.ContinueOnError)
	Group(fs, "broker", func() {
		fs.String("listen", "127.0.0.1:6650", "Pulsar protocol listen address")
		fs.Int("max-things", 3, "things | at most")
		fs.StringSlice("seeds-list", nil, "a list")
	})
	Bind(fs, "listen", "broker.listen_addr", "broker.old_listen")
	var b bytes.Buffer
	if err := WriteDoc(&b, []Role{{Name: "broker", Short: "Run a broker", Flags: fs}}); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"| broker | `broker.listen_addr` | `--listen` | `127.0.0.1:6650` |",
		"| `broker.listen_addr` | `--listen` | `MERIDIAN_BROKER_LISTEN_ADDR` | `127.0.0.1:6650` | Pulsar protocol listen address (older keys: `broker.old_listen`) |",
		"| `broker.max_things` | `--max-things` | `MERIDIAN_BROKER_MAX_THINGS` | `3` | things \\| at most |",
		"| `broker.seeds_list` | `--seeds-list` | `MERIDIAN_BROKER_SEEDS_LIST` | (empty) | a list |",
		"## broker\n\nRun a broker.\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
	if strings.Contains(out, "| broker | `broker.max_things`") {
		t.Error("a count is in the ports table")
	}
}
