// Package meta is the vocabulary every room of the broker shares: topic,
// tenant and namespace names (names.go), tenants' and namespaces' records
// and policies and their store in the global metadata store (metadata.go),
// a namespace's replication policy with its defaults and validation
// (replication.go) and its permissions (auth.go), the failover record that
// names a namespace's active region (failover.go), topics' schemas
// (schema.go), and the errors a request can end with (errors.go).
//
// It may import cluster (the metadata store) and proto, never another
// package of the broker: every room imports it, so it sits below them all.
//
// Contract with its callers:
//  1. Names come from ParseTopic, ValidateTenant and ValidateNamespace: a
//     TopicName is valid by construction, and names are what keys are built
//     from, so nothing unchecked reaches a key.
//  2. Metadata reads answer from the last value read when the store is
//     unreachable (a read cache); writes always need the store, and every
//     read-modify-write is a compare-and-swap (UpdatePolicies), so
//     concurrent writers from several regions never lose each other's
//     changes.
//  3. Errors are matched with errors.Is against the sentinels here; a
//     StatusError carries the HTTP status the admin API answers with.
package meta
