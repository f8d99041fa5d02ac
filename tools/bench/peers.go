package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// The peers `make bench` compares against, installed with the ordinary Go
// tools at pinned versions (go install MODULE@VERSION into one directory),
// so every run measures the same builds.
const (
	natsServerModule = "github.com/nats-io/nats-server/v2"
	natsServerMain   = "github.com/nats-io/nats-server/v2"
	NATSServerVer    = "v2.15.2"
	natscliModule    = "github.com/nats-io/natscli"
	natscliMain      = "github.com/nats-io/natscli/nats"
	NATSCLIVer       = "v0.5.0"
	pulsarModule     = "github.com/apache/pulsar-client-go"
	pulsarPerfMain   = "github.com/apache/pulsar-client-go/perf"
	PulsarPerfVer    = "v0.19.0"
)

// Peers are the installed peer binaries.
type Peers struct {
	NATSServer string // nats-server
	NATS       string // the nats CLI (nats bench)
	PulsarPerf string // pulsar-client-go's perf tool (pulsar-perf-go)
}

// installCommands are the exact commands InstallPeers runs (for the report).
func installCommands() []string {
	return []string{
		"go install " + natsServerMain + "@" + NATSServerVer,
		"go install " + natscliMain + "@" + NATSCLIVer,
		"go install " + pulsarPerfMain + "@" + PulsarPerfVer,
	}
}

// InstallPeers makes sure gobin holds nats-server, nats and perf at the
// pinned versions: a binary whose embedded module version (go version -m)
// is not the pinned one is installed again with `go install` (GOBIN=gobin).
func InstallPeers(ctx context.Context, gobin string, out io.Writer) (Peers, error) {
	gobin, err := filepath.Abs(gobin)
	if err != nil {
		return Peers{}, err
	}
	if err := os.MkdirAll(gobin, 0o755); err != nil {
		return Peers{}, err
	}
	p := Peers{
		NATSServer: filepath.Join(gobin, "nats-server"),
		NATS:       filepath.Join(gobin, "nats"),
		PulsarPerf: filepath.Join(gobin, "perf"),
	}
	for _, x := range []struct{ bin, pkg, mod, ver string }{
		{p.NATSServer, natsServerMain, natsServerModule, NATSServerVer},
		{p.NATS, natscliMain, natscliModule, NATSCLIVer},
		{p.PulsarPerf, pulsarPerfMain, pulsarModule, PulsarPerfVer},
	} {
		if v := moduleVersion(ctx, x.bin, x.mod); v == x.ver {
			continue
		}
		fmt.Fprintf(out, "go install %s@%s ...\n", x.pkg, x.ver)
		c := exec.CommandContext(ctx, "go", "install", x.pkg+"@"+x.ver)
		c.Env = append(os.Environ(), "GOBIN="+gobin)
		c.Stdout, c.Stderr = out, out
		if err := c.Run(); err != nil {
			return Peers{}, fmt.Errorf("bench: go install %s@%s: %w", x.pkg, x.ver, err)
		}
		if v := moduleVersion(ctx, x.bin, x.mod); v != x.ver {
			return Peers{}, fmt.Errorf("bench: %s reports module %s %q after go install, want %s", x.bin, x.mod, v, x.ver)
		}
	}
	return p, nil
}

// moduleVersion is the version of module mod built into bin ("" if bin is
// missing or does not name it), from `go version -m`.
func moduleVersion(ctx context.Context, bin, mod string) string {
	if _, err := os.Stat(bin); err != nil {
		return ""
	}
	b, err := exec.CommandContext(ctx, "go", "version", "-m", bin).Output()
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) >= 3 && (f[0] == "mod" || f[0] == "dep") && f[1] == mod {
			return f[2]
		}
	}
	return ""
}
