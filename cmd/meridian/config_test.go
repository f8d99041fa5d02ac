package main

import (
	"path/filepath"
	"testing"
	"time"
)

// The example config of every role under deploy/ parses with no unknown
// field, so the examples cannot drift from the code silently.
func TestDeployExamplesParse(t *testing.T) {
	files, _ := filepath.Glob("../../deploy/*.yaml")
	if len(files) == 0 {
		t.Fatal("no deploy/*.yaml examples")
	}
	for _, f := range files {
		fc, err := loadConfig(f)
		if err != nil {
			t.Errorf("%s: %v", f, err)
		}
		if filepath.Base(f) == "bookie.yaml" {
			if fc.Bookie.DiskCheckInterval != time.Second || fc.Bookie.Rack != "r1" || fc.Region != "east" {
				t.Errorf("bookie.yaml decoded wrongly: %+v", fc.Bookie)
			}
		}
	}
}
