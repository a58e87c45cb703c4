// Package analyze turns a benchmark sweep (runs at increasing concurrency)
// into per-rail RDMA throughput, bytes per input token, the knee and the
// saturation ceiling, from the exporter's HCA counters and SGLang's token
// counter in Prometheus. It backs `fabric_analyze`.
package analyze
