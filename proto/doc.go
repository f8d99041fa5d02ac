// Package proto holds the protobuf definitions of Meridian's internal
// protocols and metadata records, with their generated Go code (committed):
//
//   - bookiepb: the bookie gRPC service (pipelined adds, reads, last-add-
//     confirmed with fencing, info).
//   - metapb: records stored in etcd (ledger metadata, bookie registrations,
//     cookies). Field numbers are a storage format: never reuse one.
//
// `make proto` regenerates the Go code with the pinned protoc-gen-go and
// protoc-gen-go-grpc (see the Makefile); TestGeneratedCodeIsFresh fails
// when the committed code is stale and the generators are installed.
package proto
