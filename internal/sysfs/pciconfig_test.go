package sysfs

import (
	"encoding/binary"
	"errors"
	"testing"
)

// extCfg builds a 4096-byte configuration space with the extended
// capabilities given as {offset, id, next, version}.
func extCfg(caps ...[4]int) []byte {
	b := make([]byte, PCIConfigExtended)
	for _, c := range caps {
		binary.LittleEndian.PutUint32(b[c[0]:], uint32(c[1])|uint32(c[3])<<16|uint32(c[2])<<20)
	}
	return b
}

func TestPCIACS(t *testing.T) {
	// AER at 0x100, then ACS at 0x148 (with the bits lspci printed for a
	// PLX PEX 8725 downstream port: ACSCap all +, ACSCtl SrcValid+
	// ReqRedir+ CmpltRedir+ UpstreamFwd+).
	on := extCfg([4]int{0x100, 0x01, 0x148, 2}, [4]int{0x148, 0x0d, 0, 1})
	binary.LittleEndian.PutUint16(on[0x14c:], 0x7f)
	binary.LittleEndian.PutUint16(on[0x14e:], 0x1d)
	// A list that does not ascend: 0x100 -> 0x300 -> 0x200 (ACS).
	back := extCfg([4]int{0x100, 0x01, 0x300, 2}, [4]int{0x300, 0x0b, 0x200, 1}, [4]int{0x200, 0x0d, 0, 1})
	binary.LittleEndian.PutUint16(back[0x204:], 0x5f)
	for _, tc := range []struct {
		name          string
		cfg           []byte
		found         bool
		off           int
		cap, ctl      uint16
		noExt, garbge bool
	}{
		{name: "acs on", cfg: on, found: true, off: 0x148, cap: 0x7f, ctl: 0x1d},
		{name: "backwards list", cfg: back, found: true, off: 0x200, cap: 0x5f},
		{name: "no acs", cfg: extCfg([4]int{0x100, 0x01, 0x140, 2}, [4]int{0x140, 0x02, 0, 1})},
		{name: "empty list", cfg: extCfg()},
		{name: "all ones", cfg: func() []byte { b := extCfg(); copy(b[0x100:], []byte{0xff, 0xff, 0xff, 0xff}); return b }()},
		{name: "next below 0x100 ends", cfg: extCfg([4]int{0x100, 0x01, 0x40, 2})},
		{name: "unprivileged", cfg: make([]byte, PCIConfigHeaderSize), noExt: true},
		{name: "conventional", cfg: make([]byte, PCIConfigConventional), noExt: true},
		{name: "loop", cfg: extCfg([4]int{0x100, 0x01, 0x140, 2}, [4]int{0x140, 0x02, 0x100, 1}), garbge: true},
		{name: "self loop", cfg: extCfg([4]int{0x100, 0x01, 0x100, 2}), garbge: true},
		{name: "cut off", cfg: extCfg([4]int{0x100, 0x01, 0xffc, 2}, [4]int{0xffc, 0x0d, 0, 1}), garbge: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			acs, found, err := ParsePCIACS(tc.cfg)
			switch {
			case tc.noExt:
				if !errors.Is(err, ErrNoExtendedConfig) {
					t.Fatalf("err = %v, want ErrNoExtendedConfig", err)
				}
			case tc.garbge:
				if !errors.Is(err, ErrGarbage) {
					t.Fatalf("err = %v, want ErrGarbage", err)
				}
			case err != nil:
				t.Fatal(err)
			}
			if found != tc.found || acs.Offset != tc.off || acs.Cap != tc.cap || acs.Control != tc.ctl {
				t.Errorf("got %+v found=%v, want off %#x cap %#x ctl %#x found=%v", acs, found, tc.off, tc.cap, tc.ctl, tc.found)
			}
		})
	}
}

func TestPCIExtCapBound(t *testing.T) {
	// 70 distinct capabilities in a chain: more than maxExtCaps.
	var caps [][4]int
	for i := 0; i < 70; i++ {
		caps = append(caps, [4]int{0x100 + 8*i, 0x01, 0x100 + 8*(i+1), 1})
	}
	if _, _, err := FindPCIExtCap(extCfg(caps...), PCIExtCapACS); !errors.Is(err, ErrGarbage) {
		t.Fatalf("err = %v, want ErrGarbage", err)
	}
	if ACSBitName(2) != "rr" || ACSBitName(NumACSBits-1) != "dt" || 1<<2 != ACSRequestRedirect {
		t.Error("bit names out of order")
	}
}

func FuzzPCIACS(f *testing.F) {
	on := extCfg([4]int{0x100, 0x01, 0x148, 2}, [4]int{0x148, 0x0d, 0, 1})
	f.Add(on[0x100:0x200])
	f.Add(extCfg([4]int{0x100, 0x01, 0x100, 2})[0x100:0x110])
	f.Fuzz(func(t *testing.T, ext []byte) {
		cfg := make([]byte, PCIConfigExtended)
		copy(cfg[0x100:], ext)
		acs, found, err := ParsePCIACS(cfg)
		if err != nil && found {
			t.Fatal("found with an error")
		}
		if found && (acs.Offset < 0x100 || acs.Offset+8 > PCIConfigExtended || acs.Offset%4 != 0 ||
			binary.LittleEndian.Uint16(cfg[acs.Offset:]) != PCIExtCapACS) {
			t.Fatalf("bad ACS offset %#x", acs.Offset)
		}
		if _, _, err := ParsePCIACS(cfg[:len(cfg)-1]); !errors.Is(err, ErrNoExtendedConfig) {
			t.Fatal("short space decoded")
		}
	})
}
