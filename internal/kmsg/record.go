package kmsg

import "bytes"

// Record is one /dev/kmsg record. Message, Subsystem and Device are
// subslices of the bytes it was parsed from, valid while those are.
type Record struct {
	Facility uint8  // prio >> 3: 0 for the kernel's own messages
	Level    uint8  // prio & 7: 0 emergency … 7 debug
	Seq      uint64 // the record's sequence number
	Usec     uint64 // microseconds since boot (the kernel's local clock)
	// Cont is the header's "c" flag (a continuation fragment, kernels
	// before 5.10 and drivers that print with KERN_CONT).
	Cont bool
	// Message is the text after ';', with the kernel's escaping
	// (non-printable bytes and '\n' as \xNN) left as it is.
	Message []byte
	// Subsystem and Device are the record's SUBSYSTEM= and DEVICE=
	// dictionary values ("pci", "+pci:0000:3b:00.0"), empty without.
	Subsystem, Device []byte
	// Raw is the whole record as it was read: the header line and the
	// dictionary lines (what `cat /dev/kmsg` writes for it).
	Raw []byte
}

// Kernel reports whether the record comes from the kernel: userspace
// writes to /dev/kmsg never carry facility 0 (devkmsg_write turns it into
// LOG_USER), so a forged "NVRM: Xid" from a process is not one.
func (r *Record) Kernel() bool { return r.Facility == 0 }

// PCIDevice returns the PCI address of the record's DEVICE=+pci:… entry
// ("0000:3b:00.0"), nil when it names no PCI function.
func (r *Record) PCIDevice() []byte {
	if d, ok := bytes.CutPrefix(r.Device, []byte("+pci:")); ok && isBDF(d) {
		return d
	}
	return nil
}

// ParseRecord parses one record as a read of /dev/kmsg returns it:
//
//	prio,seq,usec,flags[,more…];message\n
//	 KEY=VALUE\n                      (dictionary, zero or more lines)
//
// (Documentation/ABI/testing/dev-kmsg). The trailing newline is optional;
// fields after flags are ignored, as the ABI allows them to be added. It
// reports false for anything else.
func ParseRecord(b []byte) (Record, bool) {
	r := Record{Raw: b}
	head, rest, ok := bytes.Cut(b, []byte{';'})
	if !ok {
		return r, false
	}
	var fields [4][]byte
	for i := range fields {
		f, more, found := bytes.Cut(head, []byte{','})
		if !found && i < 3 {
			return r, false
		}
		fields[i], head = f, more
	}
	prio, ok1 := parseUint(fields[0])
	seq, ok2 := parseUint(fields[1])
	usec, ok3 := parseUint(fields[2])
	if !ok1 || !ok2 || !ok3 || prio > 1023 || len(fields[3]) != 1 {
		return r, false
	}
	r.Facility, r.Level, r.Seq, r.Usec = uint8(prio>>3), uint8(prio&7), seq, usec
	r.Cont = fields[3][0] == 'c'
	msg, dict, _ := bytes.Cut(rest, []byte{'\n'})
	r.Message = msg
	for len(dict) > 0 {
		var line []byte
		line, dict, _ = bytes.Cut(dict, []byte{'\n'})
		kv, ok := bytes.CutPrefix(line, []byte{' '})
		if !ok {
			return r, false // not a dictionary line: not one record
		}
		switch {
		case bytes.HasPrefix(kv, []byte("SUBSYSTEM=")):
			r.Subsystem = kv[len("SUBSYSTEM="):]
		case bytes.HasPrefix(kv, []byte("DEVICE=")):
			r.Device = kv[len("DEVICE="):]
		}
	}
	return r, true
}

// parseUint parses a decimal of at most 19 digits.
func parseUint(b []byte) (uint64, bool) {
	if len(b) == 0 || len(b) > 19 {
		return 0, false
	}
	var v uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + uint64(c-'0')
	}
	return v, true
}
