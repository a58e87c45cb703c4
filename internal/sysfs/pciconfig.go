package sysfs

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// PCI configuration space as /sys/bus/pci/devices/<bdf>/config returns it
// (include/uapi/linux/pci_regs.h). The kernel (pci_read_config in
// drivers/pci/pci-sysfs.c) hands a reader without CAP_SYS_ADMIN only the
// first 64 bytes (128 for a CardBus bridge); with it, the whole space of the
// function: 256 bytes for conventional PCI or when the platform gives no
// access to the extended space, 4096 for PCI Express.
const (
	PCIConfigHeaderSize   = 64   // what a reader without CAP_SYS_ADMIN gets
	PCIConfigConventional = 256  // conventional configuration space
	PCIConfigExtended     = 4096 // PCI Express extended configuration space
)

// PCIExtCapACS is the Access Control Services extended capability ID
// (PCI_EXT_CAP_ID_ACS).
const PCIExtCapACS = 0x0d

// The ACS capability: PCI_ACS_CAP (16 bits at +4) and PCI_ACS_CTRL (16 bits
// at +6) share one bit layout for the seven controls.
const (
	ACSSourceValidation   = 0x0001 // PCI_ACS_SV
	ACSTranslationBlock   = 0x0002 // PCI_ACS_TB
	ACSRequestRedirect    = 0x0004 // PCI_ACS_RR: P2P requests go up to the root complex
	ACSCompletionRedirect = 0x0008 // PCI_ACS_CR: P2P completions go up
	ACSUpstreamForwarding = 0x0010 // PCI_ACS_UF
	ACSEgressControl      = 0x0020 // PCI_ACS_EC
	ACSDirectTranslated   = 0x0040 // PCI_ACS_DT: direct translated P2P
	NumACSBits            = 7
)

var acsBitNames = [NumACSBits]string{"sv", "tb", "rr", "cr", "uf", "ec", "dt"}

// ACSBitName returns the short name of ACS bit i (0 <= i < NumACSBits), bit
// 1<<i of the capability and control registers: sv, tb, rr, cr, uf, ec, dt
// (lspci's SrcValid, TransBlk, ReqRedir, CmpltRedir, UpstreamFwd, EgressCtrl,
// DirectTrans).
func ACSBitName(i int) string { return acsBitNames[i] }

// ACS is a function's Access Control Services capability.
type ACS struct {
	Offset  int    // of the capability header in configuration space
	Cap     uint16 // PCI_ACS_CAP: what the port implements
	Control uint16 // PCI_ACS_CTRL: what is enabled
}

// ErrNoExtendedConfig means the configuration space given holds no
// extended space (fewer than 4096 bytes: no privilege, conventional PCI):
// whether there is an ACS capability cannot be known.
var ErrNoExtendedConfig = errors.New("no extended configuration space (need 4096 bytes; readers without CAP_SYS_ADMIN get 64)")

// maxExtCaps bounds the walk of the extended capability list: 4096-256
// bytes hold at most 960 headers, but a real list has a handful; a longer
// one is a loop or garbage.
const maxExtCaps = 64

// FindPCIExtCap walks the extended capability list from 0x100 and returns
// the offset of the first capability with the given ID. ok is false when
// the list does not hold it: an empty list (0 or 0xffffffff at 0x100), or
// a next pointer below 0x100, ends it, as in the kernel's
// pci_find_next_ext_capability. The list need not ascend; a list that comes
// back to a capability already seen, or runs past maxExtCaps, is an error.
func FindPCIExtCap(cfg []byte, id uint16) (off int, ok bool, err error) {
	if len(cfg) < PCIConfigExtended {
		return 0, false, ErrNoExtendedConfig
	}
	var seen [PCIConfigExtended / 4 / 64]uint64 // one bit per dword
	off = 0x100
	for n := 0; n < maxExtCaps; n++ {
		hdr := binary.LittleEndian.Uint32(cfg[off:])
		if hdr == 0 || hdr == 0xffffffff {
			return 0, false, nil
		}
		if uint16(hdr) == id {
			return off, true, nil
		}
		w := off / 4
		seen[w/64] |= 1 << (w % 64)
		next := int(hdr>>20) &^ 3 // PCI_EXT_CAP_NEXT
		if next < 0x100 {
			return 0, false, nil
		}
		if w := next / 4; seen[w/64]&(1<<(w%64)) != 0 {
			return 0, false, fmt.Errorf("%w: extended capability list loops at %#x", ErrGarbage, next)
		}
		off = next
	}
	return 0, false, fmt.Errorf("%w: more than %d extended capabilities", ErrGarbage, maxExtCaps)
}

// ParsePCIACS finds and decodes the ACS capability. found is false (with a
// nil error) when the function's extended capability list holds no ACS.
func ParsePCIACS(cfg []byte) (acs ACS, found bool, err error) {
	off, ok, err := FindPCIExtCap(cfg, PCIExtCapACS)
	if err != nil || !ok {
		return ACS{}, false, err
	}
	if off+8 > len(cfg) {
		return ACS{}, false, fmt.Errorf("%w: ACS capability at %#x cut off", ErrGarbage, off)
	}
	return ACS{Offset: off, Cap: binary.LittleEndian.Uint16(cfg[off+4:]), Control: binary.LittleEndian.Uint16(cfg[off+6:])}, true, nil
}
