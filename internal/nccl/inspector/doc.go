// Package inspector parses the two output formats of the NCCL Inspector
// profiler plugin
// (plugins/profiler/inspector of NVIDIA/nccl; formats read from its
// inspector_json.cc and inspector_prom.cc at v2.30.7-1, output format
// "v4.0" in JSON and "v5.1" in the textfile, both also written by the
// plugin PyTorch's NCCL 2.28.9 loaded on the lent H200:
// collector/fixtures/nccl-inspector/).
//
// JSON mode (the default) appends one object per completed operation to
// <hostname>-pid<pid>.log in NCCL_INSPECTOR_DUMP_DIR:
//
//	{"header":{"id":"0xa6ce86ab2388df","comm_name":"unknown","rank":0,"n_ranks":2,"nnodes":2},
//	 "metadata":{"inspector_output_format_version":"v4.0",…,"hostname":"vm","pid":692},
//	 "coll_perf":{"coll":"AllReduce","coll_sn":0,"coll_msg_size_bytes":67108864,
//	              "coll_exec_time_us":43423,"coll_timing_source":"kernel_gpu",
//	              "coll_algobw_gbs":1.545468,"coll_busbw_gbs":1.545468}}
//
// or, for point-to-point operations, "p2p_perf" with "p2p", "p2p_peer",
// "p2p_msg_size_bytes", "p2p_exec_time_us", "p2p_busbw_gbs". header.id is
// the communicator's hash (NCCL's commId); GB/s are 1e9 bytes/s.
//
// Prometheus mode (NCCL_INSPECTOR_PROM_DUMP=1) rewrites, every dump
// interval (30 s at least), nccl_inspector_metrics_<GPU UUID>.prom with one
// pair of lines per (communicator name, collective, message-size range,
// algorithm_protocol) that had operations in the interval:
//
//	nccl_bus_bandwidth_gbs{version="v5.1",slurm_job_id="unknown",node="vm",gpu="GPU0",comm_name="unknown",
//	  n_nodes="2",nranks="2",collective="AllReduce",message_size="64-65MB",algo_proto="RING_SIMPLE"} 1.85572
//	nccl_collective_exec_time_microseconds{…same labels…} 36164.6
//
// (and nccl_p2p_bus_bandwidth_gbs / nccl_p2p_exec_time_microseconds with
// p2p_operation instead of collective and no algo_proto). The bandwidth is
// the geometric mean and the time the arithmetic mean over the interval;
// there is no count and no pid. Every process on that GPU truncates and
// rewrites the same file, and the plugin deletes it at teardown.
//
// Both parsers are bounded: label values are at most 128 bytes of valid
// UTF-8, operation names one of NCCL's functions or "other", message sizes
// one of six buckets, algorithm_protocol one of NCCL's or "other", counts
// decimal or "other"; ParseProm reads at most MaxPromFile bytes. The
// package knows nothing of metrics: the exporter's nccl-inspector collector
// sums operations and turns them into series; the JSON files are followed
// with internal/nccl's Follower.
package inspector
