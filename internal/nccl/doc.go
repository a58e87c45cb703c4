// Package nccl reads NCCL's INFO logs (NCCL_DEBUG=INFO output, usually one
// file per process with NCCL_DEBUG_FILE=/var/log/nccl/%h.%p.log) and keeps,
// per NCCL process (host, pid), what its lines say: the network NCCL chose
// and how sure that is, the transports of its channel connections with GPU
// Direct RDMA, the RDMA devices and socket interfaces it uses, its version,
// the NCCL variables it reported, GPU Direct RDMA disabled per device, its
// warnings and whether its init found no network at all.
//
// It understands the log formats of NCCL 2.3 to 2.30 (the version table in
// message.go cites the NVIDIA/nccl source of every line it relies on),
// with the prefixes real collection adds (Open MPI, Ray, pdsh, kubectl and
// journald timestamps, quotes); docs/nccl-classification.md has the rules.
//
// Three parts, used together by the exporter's nccl collector and by
// tools/ncclbench (ScanLog):
//
//   - the line parser (line.go, message.go): pure functions over one line,
//     no allocation, every field a subslice of the line;
//   - the Follower (follow.go): follows the files of a set of globs from
//     their start across rotation, truncation and replacement, and hands
//     complete lines to a Sink; it also follows the NCCL Inspector's JSON
//     files (package inspector parses those);
//   - the Tracker (tracker.go, process.go): a Sink that parses the lines
//     into Processes.
//
// Everything is bounded against hostile or corrupt logs: a line is at most
// 64 KiB (longer ones are dropped and counted), the Follower holds one read
// buffer plus one partial line per file and no descriptor between polls,
// the Tracker at most MaxProcesses processes, each with bounded lists, and
// every string it keeps is at most 128 bytes, cut at a UTF-8 character
// boundary.
//
// The package knows nothing of metrics: the collector turns Processes into
// series.
package nccl
