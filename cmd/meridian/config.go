package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/meridian-mq/meridian/bookie"
	"github.com/meridian-mq/meridian/cluster"
	"gopkg.in/yaml.v3"
)

// FileConfig is the one config file format of every role (YAML). Each role
// reads the sections it needs; flags override the file. Examples per role
// are in deploy/.
type FileConfig struct {
	// Region this process belongs to. Default "default".
	Region string `yaml:"region"`
	// Metadata: where the region's etcd is.
	Metadata MetadataConfig `yaml:"metadata"`
	// Bookie: the storage node role.
	Bookie bookie.Config `yaml:"bookie"`
	// Broker: the broker role (`meridian broker`).
	Broker BrokerFileConfig `yaml:"broker"`
	// Etcd: the embedded etcd role (`meridian etcd`).
	Etcd cluster.EtcdConfig `yaml:"etcd"`
	// Security: TLS, tokens, authorization, etcd credentials
	// (security.go). Absent: plaintext, no authentication.
	Security SecurityFileConfig `yaml:"security"`
}

// MetadataConfig locates the region's etcd.
type MetadataConfig struct {
	// Endpoints of the region's etcd, e.g. ["http://127.0.0.1:2379"].
	Endpoints []string `yaml:"endpoints"`
	// Root prefix of Meridian's keys. Default "/meridian". A region's keys
	// live under ROOT/regions/REGION, the global store's under ROOT/global.
	Root string `yaml:"root"`
	// Global: the global store's endpoints (one etcd cluster with a member
	// per region and a witness). Empty: the region's etcd (one region).
	Global []string `yaml:"global"`
}

func (m MetadataConfig) globalPrefix() string {
	root := m.Root
	if root == "" {
		root = "/meridian"
	}
	return strings.TrimRight(root, "/") + "/global"
}

func (m MetadataConfig) regionPrefix(region string) string {
	root := m.Root
	if root == "" {
		root = "/meridian"
	}
	return strings.TrimRight(root, "/") + "/regions/" + region
}

func loadConfig(path string) (FileConfig, error) {
	fc := FileConfig{Bookie: bookie.DefaultConfig()}
	if path == "" {
		return fc, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return fc, fmt.Errorf("config: %w", err)
	}
	dec := yaml.NewDecoder(strings.NewReader(string(b)))
	dec.KnownFields(true)
	if err := dec.Decode(&fc); err != nil {
		return fc, fmt.Errorf("config %s: %w", path, err)
	}
	return fc, nil
}
