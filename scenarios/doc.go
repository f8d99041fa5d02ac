// Package scenarios runs disaster drills: a topology, a workload of
// unmodified Pulsar clients, a schedule of real faults (kill -9, pauses,
// partitions, slow WAN links, full disks) and a checker that reports what
// was lost, duplicated and reordered, with RPO and RTO. Drill files live
// beside it. Built by the drills issue.
package scenarios
