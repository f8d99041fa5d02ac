package main

import "strings"

// The config file is one format for every role (YAML): each role reads
// the keys of its flags (roleconfig.go, internal/config) and accepts
// every role's keys, so one file can serve several. Examples per role are
// in deploy/; `meridian ROLE --print-config` prints a role's keys.

// globalPrefix is the global store's etcd key prefix under root.
func globalPrefix(root string) string {
	if root == "" {
		root = "/meridian"
	}
	return strings.TrimRight(root, "/") + "/global"
}

// regionPrefix is region's etcd key prefix under root.
func regionPrefix(root, region string) string {
	if root == "" {
		root = "/meridian"
	}
	return strings.TrimRight(root, "/") + "/regions/" + region
}
