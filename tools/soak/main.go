// Command soak runs the disaster-path tests and drills in a loop, each
// with a fresh deployment, and keeps score in docs/soak.md across
// sessions (make soak; issue "Zero unexplained failures").
//
//	go run ./tools/soak [-time 2h] [-only NAME,...] [-doc docs/soak.md] [-dir soak-out]
//
// Each round runs the item with the fewest runs recorded so far (ties in
// list order), so a soak stopped and started again goes on where it was.
// A run appends one row to the document's run table and the totals are
// written again; a failed run's logs (every process's, the test's output
// or the drill's report) are kept under -dir and named in its row, a
// passed run's are deleted. It starts no new run once -time has passed.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// item is one test or drill of the soak.
type item struct {
	Name string
	// Pkg and Run for a test (go test -run Run Pkg); Drill for a drill.
	Pkg, Run, Drill string
}

// items are the tests and drills the issue names, none dropped.
var items = []item{
	{Name: "TestOwnerBrokerLoss/killed", Pkg: "./broker/", Run: "^TestOwnerBrokerLoss$/^killed$"},
	{Name: "TestOwnerBrokerLoss/terminated", Pkg: "./broker/", Run: "^TestOwnerBrokerLoss$/^terminated$"},
	{Name: "TestFailbackAfterRegionReturns", Pkg: "./tools/georep/", Run: "^TestFailbackAfterRegionReturns$"},
	{Name: "TestFailbackQuarantinesOrphans", Pkg: "./tools/georep/", Run: "^TestFailbackQuarantinesOrphans$"},
	{Name: "TestStretchedDegradedPlacement", Pkg: "./tools/georep/", Run: "^TestStretchedDegradedPlacement$"},
	{Name: "TestRackLossAuditsAtOnceAndSparesIdleOpenLedgers", Pkg: "./bookie/autorecovery/", Run: "^TestRackLossAuditsAtOnceAndSparesIdleOpenLedgers$"},
	{Name: "TestGossipKeyRotationThroughAdmin", Pkg: "./tools/georep/", Run: "^TestGossipKeyRotationThroughAdmin$"},
	{Name: "TestMembershipEncryptionAndKeyRotation", Pkg: "./cluster/", Run: "^TestMembershipEncryptionAndKeyRotation$"},
	{Name: "drill region-outage-async", Drill: "region-outage-async"},
	{Name: "drill region-outage-sync", Drill: "region-outage-sync"},
	{Name: "drill failback", Drill: "failback"},
	{Name: "drill owner-broker-crash", Drill: "owner-broker-crash"},
	{Name: "drill region-partition", Drill: "region-partition"},
}

// run is one row of the run table.
type run struct {
	When, Commit, Name, Result, Seconds, Logs string
}

const (
	runsHeader = "| when (UTC) | commit | test | result | seconds | kept logs |"
	runsRule   = "|---|---|---|---|---:|---|"
)

func main() {
	timeBox := flag.Duration("time", 2*time.Hour, "start no new run after this long")
	only := flag.String("only", "", "comma-separated item names to run (default: all)")
	doc := flag.String("doc", "docs/soak.md", "the document keeping score")
	dir := flag.String("dir", "soak-out", "where failed runs' logs are kept")
	flag.Parse()
	if err := soak(*timeBox, *only, *doc, *dir); err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		os.Exit(1)
	}
}

func soak(timeBox time.Duration, only, doc, dir string) error {
	chosen := items
	if only != "" {
		chosen = nil
		for _, n := range strings.Split(only, ",") {
			i := slices.IndexFunc(items, func(it item) bool { return it.Name == strings.TrimSpace(n) })
			if i < 0 {
				return fmt.Errorf("no item %q", n)
			}
			chosen = append(chosen, items[i])
		}
	}
	runs, err := readRuns(doc)
	if err != nil {
		return err
	}
	commit := gitCommit()
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	bin, err := build(abs)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(timeBox)
	for time.Now().Before(deadline) {
		it := next(chosen, runs)
		r := runOne(it, bin, abs, commit)
		runs = append(runs, r)
		if err := writeDoc(doc, runs); err != nil {
			return err
		}
		fmt.Printf("%s  %-52s %-5s %5ss %s\n", r.When, r.Name, r.Result, r.Seconds, r.Logs)
	}
	printTotals(os.Stdout, runs)
	return nil
}

// build builds the meridian binary the drills run (tests build their own).
func build(dir string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "meridian")
	out, err := exec.Command("go", "build", "-o", bin, "./cmd/meridian").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build: %v\n%s", err, out)
	}
	return bin, nil
}

// next is the item with the fewest runs (ties: list order).
func next(chosen []item, runs []run) item {
	count := map[string]int{}
	for _, r := range runs {
		count[r.Name]++
	}
	best := chosen[0]
	for _, it := range chosen[1:] {
		if count[it.Name] < count[best.Name] {
			best = it
		}
	}
	return best
}

func runOne(it item, bin, dir, commit string) run {
	start := time.Now().UTC()
	logs := filepath.Join(dir, strings.NewReplacer("/", "_", " ", "_").Replace(it.Name), start.Format("20060102T150405Z"))
	_ = os.MkdirAll(logs, 0o755)
	// A run that hangs is a failure, not the end of the soak: bounded by
	// the test's own timeout (15 min) or the drill's, whichever applies.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	var cmd *exec.Cmd
	if it.Drill != "" {
		cmd = exec.CommandContext(ctx, bin, "drill", it.Drill, "--out", logs)
	} else {
		cmd = exec.CommandContext(ctx, "go", "test", "-count=1", "-p", "1", "-timeout", "15m", "-v", "-run", it.Run, it.Pkg)
		cmd.Env = append(os.Environ(), "MERIDIAN_TEST_KEEP_LOGS="+logs)
	}
	out, err := os.Create(filepath.Join(logs, "output.txt"))
	if err == nil {
		cmd.Stdout, cmd.Stderr = out, out
	}
	runErr := cmd.Run()
	if out != nil {
		out.Close()
	}
	r := run{When: start.Format("2006-01-02 15:04"), Commit: commit, Name: it.Name,
		Seconds: fmt.Sprintf("%.0f", time.Since(start).Seconds()), Result: "pass"}
	if runErr == nil && it.Drill == "" && !ranSomething(filepath.Join(logs, "output.txt")) {
		runErr = errors.New("no test ran")
	}
	if runErr != nil {
		r.Result, r.Logs = "FAIL", logs
		return r
	}
	_ = os.RemoveAll(logs)
	return r
}

// ranSomething reports whether a go test -v output shows a test passing
// (a -run pattern that matches nothing passes with no test run).
func ranSomething(path string) bool {
	b, err := os.ReadFile(path)
	return err == nil && strings.Contains(string(b), "--- PASS:")
}

func gitCommit() string {
	out, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return "?"
	}
	c := strings.TrimSpace(string(out))
	if st, _ := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output(); len(strings.TrimSpace(string(st))) > 0 {
		c += "+changes"
	}
	return c
}

// readRuns reads the run table of doc (none if doc does not exist).
func readRuns(doc string) ([]run, error) {
	f, err := os.Open(doc)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var runs []run
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == runsHeader:
			in = true
		case in && line == runsRule:
		case in && strings.HasPrefix(line, "| "):
			c := strings.Split(line, "|")
			if len(c) != 8 {
				return nil, fmt.Errorf("%s: a run row with %d cells: %q", doc, len(c)-2, line)
			}
			for i := range c {
				c[i] = strings.TrimSpace(c[i])
			}
			runs = append(runs, run{When: c[1], Commit: c[2], Name: c[3], Result: c[4], Seconds: c[5], Logs: strings.Trim(c[6], "`")})
		case in:
			in = false
		}
	}
	return runs, sc.Err()
}

type total struct {
	runs, passes, failures int
	lastFail               string
}

func totals(runs []run) map[string]*total {
	t := map[string]*total{}
	for _, it := range items {
		t[it.Name] = &total{}
	}
	for _, r := range runs {
		x := t[r.Name]
		if x == nil {
			x = &total{}
			t[r.Name] = x
		}
		x.runs++
		if r.Result == "pass" {
			x.passes++
		} else {
			x.failures++
			x.lastFail = r.When + " " + r.Commit + " " + r.Logs
		}
	}
	return t
}

func printTotals(w *os.File, runs []run) {
	t := totals(runs)
	for _, it := range items {
		x := t[it.Name]
		fmt.Fprintf(w, "%-52s runs %3d  passes %3d  failures %3d  %s\n", it.Name, x.runs, x.passes, x.failures, x.lastFail)
	}
}

func writeDoc(doc string, runs []run) error {
	var b strings.Builder
	b.WriteString(`# Soak: the disaster paths, run in a loop

` + "`make soak`" + ` (` + "`go run ./tools/soak`" + `, default time box 2 h: ` + "`SOAK_TIME=30m make soak`" + `) runs each
of the tests and drills below in turn, each with a fresh deployment, and
appends every run to the table at the end of this file, which is
committed, so the count grows across sessions. The next run is always
the item with the fewest runs so far. A failed run's logs (every
process's log, the test's output, a drill's report and timeline) are kept
under ` + "`soak-out/`" + ` and named in its row; they are findings of the
reliability issue until their cause is known. This file is written by
the tool: edit it only to record, below the tables, what a failure was.

## Totals

| test or drill | runs | passes | failures | last failure |
|---|---:|---:|---:|---|
`)
	t := totals(runs)
	for _, it := range items {
		x := t[it.Name]
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %s |\n", it.Name, x.runs, x.passes, x.failures, x.lastFail)
	}
	b.WriteString("\n## Runs\n\n" + runsHeader + "\n" + runsRule + "\n")
	for _, r := range runs {
		logs := r.Logs
		if logs != "" {
			logs = "`" + logs + "`"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s |\n", r.When, r.Commit, r.Name, r.Result, r.Seconds, logs)
	}
	// What was found: kept from the existing file (everything after the
	// run table), so notes written by hand survive.
	if old, err := os.ReadFile(doc); err == nil {
		if i := strings.Index(string(old), "\n## Findings"); i >= 0 {
			b.WriteString(string(old[i:]))
		}
	} else {
		b.WriteString("\n## Findings\n\nNone yet.\n")
	}
	tmp := doc + ".tmp"
	if err := os.WriteFile(tmp, []byte(b.String()), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, doc)
}
