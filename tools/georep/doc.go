// Package georep holds the end-to-end tests of geo-replication: real
// regions started as OS processes by tools/up (`meridian up`'s engine),
// the unmodified pulsar-client-go producing in one region and consuming in
// another, and kill -9 of processes and whole regions. Helpers here start
// a deployment and read its replication status.
package georep
