// Package kmsg reads the kernel log from /dev/kmsg and classifies the
// kernel lines that report a fabric failure no counter shows: a wedged
// mlx5 driver, a transmit queue timeout, a cable or transceiver event, a
// PCIe error or link loss, an NVIDIA Xid or a GPU fallen off the bus.
//
// # Reading
//
// Each read of /dev/kmsg returns one record (Documentation/ABI/testing/
// dev-kmsg): "prio,seq,usec,flags;message\n", then the record's dictionary
// lines (" SUBSYSTEM=pci\n DEVICE=+pci:0000:3b:00.0\n"). The Reader opens
// the device O_RDONLY|O_NONBLOCK|O_CLOEXEC and, unless asked to replay the
// buffer, seeks to its end: only what the kernel logs after the exporter
// started is read. A counter that restarted with the exporter and then
// counted the whole buffer again would show every old event as new.
// A read answering EAGAIN means no more records now; EPIPE means the kernel
// overwrote records before they were read, and the gap in the sequence
// numbers of the next record says how many (Stats.Lost). Reads use raw
// system calls on the non-blocking descriptor, so no goroutine ever waits
// in a read; the caller polls (the collector every second, on the shared
// poller) and bounds the records handed out per poll.
//
// Opening needs CAP_SYSLOG when kernel.dmesg_restrict is 1 (EPERM
// otherwise), and a container needs the device itself (docker run
// --device /dev/kmsg): a host root mounted elsewhere does not give it.
//
// A regular file or FIFO is read as a recording: records as `cat
// /dev/kmsg` writes them, one after the other, from the start. Tests and
// `make demo` use recordings.
//
// # Relay
//
// Relay (fabric_exporter relay-kmsg) copies the kernel log into a FIFO
// that an exporter without the privilege reads as a recording: in
// Kubernetes a hostPath /dev/kmsg opens only in a privileged container,
// so a small privileged container relays it to the unprivileged exporter
// (deploy/kubernetes/components/kernel-events). It starts after the
// newest record, writes every record whole (Record.Raw), survives its
// reader's restarts without losing or repeating a record the kernel still
// holds, and logs the records the kernel overwrote while it waited.
//
// # Classification
//
// Classify looks at records of facility 0 only: userspace can write to
// /dev/kmsg, but never a facility 0 record (devkmsg_write), so a process
// cannot forge an Xid. It knows these lines, each from the kernel or
// driver source named at its case, tested on the lines of testdata/
// (README.md says where each was recorded); every other line is ignored,
// never guessed:
//
//	mlx5         mlx5_core <bdf>: …  command_timeout ("… timeout. Will cause a leak of a command resource"),
//	             fatal_error ("Fatal error N detected"), health_compromised ("device's health compromised -
//	             reached miss count"), fw_syndrome (the health buffer's "synd 0x…: …", once per dump),
//	             pci_slot_unavailable, recovery_failed, pcie_power_insufficient, high_temperature
//	netdev       tx_timeout (NETDEV WATCHDOG, both the pre-6.8 and the 6.8+ form, any driver),
//	             mlx5e_tx_timeout ("TX timeout detected": every timeout mlx5e recovers, where a
//	             kernel before 6.8 prints NETDEV WATCHDOG once per boot)
//	port_module  mlx5's "Port module event…": cable_plugged, cable_unplugged, cable_disabled, or for
//	             a cable error its type: power_budget_exceeded, long_range_non_mlnx_cable, bus_stuck,
//	             no_eeprom, enforce_part_number_list, unknown_identifier, high_temperature, bad_cable,
//	             pcie_slot_power; other for a string the driver may add
//	pcie         aer_correctable, aer_uncorrectable_nonfatal, aer_uncorrectable_fatal (the AER
//	             summary "PCIe Bus Error: severity=…", one per error the kernel printed; the kernel
//	             rate-limits them, the pcie collector's AER counters are exact), link_down and
//	             card_not_present (pciehp: a surprise removal), dpc_containment, aer_recovery_failed,
//	             gpu_fallen_off_bus (NVRM, with or without an Xid)
//	xid          NVRM: Xid (PCI:…): N, the kind is the code N
//
// An Event names the PCI function of the line (the dev_printk prefix, the
// record's DEVICE=+pci: entry, or the Xid's address with function 0) and
// the network interface where the line names one. Joining those to RDMA
// devices, rails and GPUs is the collector's.
//
// Not classified on purpose: mlx5 ACCESS_REG failures (what counter reads
// on firmware-restricted functions cause, not a fault), NVSwitch SXid
// (no GPU or rail of this host's PCI tree), the detail lines after an AER
// summary or an mlx5 health dump (counted once, by their first line).
//
// The package knows nothing of metrics.
package kmsg
