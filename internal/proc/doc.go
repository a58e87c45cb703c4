// Package proc parses the /proc/PID files the process collector reads:
// stat and status (ParseStat, ParseStatus), numa_maps (NumaMaps, summed per
// NUMA node like numastat -p), cpulists (ParseCPUList: Cpus_allowed_list,
// Mems_allowed_list, node*/cpulist), the container of a process from its
// cgroup file (ParseCgroupFile), the allow-listed NCCL variables of an
// environment (NCCLEnv), and lookups inside a process's root, its mount
// namespace (RootResolver, LookupInRoot). It reads no file on its own
// except through Open, ReadInto and the root lookups; it knows nothing
// about metrics. Errors for unparsable content wrap sysfs.ErrGarbage.
package proc
