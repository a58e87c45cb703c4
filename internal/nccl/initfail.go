package nccl

import "bytes"

// NCCL init failures. When NCCL finds no network at all, communicator init
// fails; these WARN messages (format strings from NCCL's source) say so:
//
//	2.27+       plugin/net.cc  "Failed to initialize any NET plugin"
//	2.12–2.26   net.cc         "Error: network %s not found."
//	2.4+        net_socket.cc  "NET/Socket : no interface found" (the socket
//	            transport is initialised only after every other net failed)
//	2.4+        bootstrap.cc   "Bootstrap : no socket interface found"
//
// The init then unwinds with "file:line -> 5" INFO lines (ncclInvalidUsage).
// Not failures: the INFO "Failed to initialize NET plugin IB" of 2.28 (NCCL
// goes on to the next plugin), and "NET/IB : Using [RO]; OOB …" after
// "NET/IB : No device found." (a device list without devices).
var (
	msgNoNetPlugin   = []byte("Failed to initialize any NET plugin")
	msgNetworkPrefix = []byte("Error: network ")
	msgNotFound      = []byte(" not found")
	msgNoSocketIf    = []byte("NET/Socket : no interface found")
	msgNoBootstrapIf = []byte("Bootstrap : no socket interface found")
	msgInitComplete  = []byte(" - Init COMPLETE")
)

// isInitFailure reports whether a WARN message says that NCCL's init
// found no usable network.
func isInitFailure(msg []byte) bool {
	switch {
	case bytes.HasPrefix(msg, msgNoNetPlugin), bytes.HasPrefix(msg, msgNoSocketIf), bytes.HasPrefix(msg, msgNoBootstrapIf):
		return true
	case bytes.HasPrefix(msg, msgNetworkPrefix):
		return bytes.Contains(msg[len(msgNetworkPrefix):], msgNotFound)
	}
	return false
}

// libibverbs that NCCL could not load (cited as file:line@tag of
// github.com/NVIDIA/nccl). NCCL loads libibverbs with dlopen when the IB
// transport initialises; when it fails, IB has no device and NCCL goes on
// to sockets:
//
//	2.3-2.10   WARN "Failed to open libibverbs.so[.1]"        (misc/ibvwrap.cu:63@v2.3.7-1, misc/ibvwrap.cc:63@v2.4.7-1)
//	2.11-2.17  INFO "Failed to open libibverbs.so[.1]"        (misc/ibvwrap.cc:63@v2.11.4-1, :56@v2.14.3-1)
//	2.18-2.29  INFO "Failed to open libibverbs.so[.1]"        (misc/ibvsymbols.cc:78@v2.18.1-1, :81@v2.28.9-1, :88@v2.29.7-1)
//	2.30+      INFO "Count not open %s" for each library tried, NCCL_IBVERBS_LIB,
//	           libibverbs.so, then libibverbs.so.1 (misc/ibvsymbols.cc:79-86@v2.30.7-1);
//	           the last one failing means none could be opened
var (
	msgFailedOpenVerbs = []byte("Failed to open libibverbs.so[.1]")
	msgCountNotOpen    = []byte("Count not open libibverbs.so.1")
)

// isVerbsLibMissing reports whether a message (INFO or WARN) says NCCL
// could not load libibverbs.
func isVerbsLibMissing(msg []byte) bool {
	return bytes.HasPrefix(msg, msgFailedOpenVerbs) ||
		bytes.HasPrefix(msg, msgCountNotOpen) && len(bytes.TrimSpace(msg)) == len(msgCountNotOpen)
}

// isInitComplete reports whether an INFO message is the line NCCL prints
// when a communicator's init succeeded ("comm 0x… rank 0 nranks 2 … - Init
// COMPLETE", every version since 2.4).
func isInitComplete(msg []byte) bool {
	return bytes.HasSuffix(msg, msgInitComplete)
}
