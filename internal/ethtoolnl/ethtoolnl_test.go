package ethtoolnl

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

func u64s(v ...uint64) []byte {
	b := make([]byte, 8*len(v))
	for i, x := range v {
		binary.NativeEndian.PutUint64(b[8*i:], x)
	}
	return b
}

// fecReply builds a reply the way net/ethtool/fec.c lays it out: header,
// modes bitset, auto, active link-mode bit, then the stats nest with a
// total-then-lanes u64 array per statistic.
func fecReply(t testing.TB, active uint32, corrected, uncorr, bits []byte) []byte {
	t.Helper()
	ae := netlink.NewAttributeEncoder()
	header(ae, aFECHeader, "eth0", 0)
	ae.Nested(aFECModes, func(nae *netlink.AttributeEncoder) error { nae.Flag(1, true); return nil })
	ae.Uint8(aFECAuto, 0)
	ae.Uint32(aFECActive, active)
	ae.Nested(aFECStats, func(nae *netlink.AttributeEncoder) error {
		nae.Bytes(aFECStatPad, nil)
		if corrected != nil {
			nae.Bytes(aFECStatCorrected, corrected)
		}
		if uncorr != nil {
			nae.Bytes(aFECStatUncorr, uncorr)
		}
		if bits != nil {
			nae.Bytes(aFECStatCorrBits, bits)
		}
		return nil
	})
	b, err := ae.Encode()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestDecodeFEC(t *testing.T) {
	// RS-FEC on mlx5: totals only (RS corrects across lanes).
	f, err := DecodeFECReply(fecReply(t, unix.ETHTOOL_LINK_MODE_FEC_RS_BIT, u64s(123456), u64s(0), nil))
	if err != nil || f.Active != "rs" || !f.Corrected.OK || f.Corrected.Total != 123456 || f.Corrected.Lanes != nil ||
		!f.Uncorrectable.OK || f.Uncorrectable.Total != 0 || f.CorrBits.OK {
		t.Errorf("%+v %v", f, err)
	}
	// FC-FEC (BASE-R): per lane; a not-set statistic is absent.
	f, err = DecodeFECReply(fecReply(t, unix.ETHTOOL_LINK_MODE_FEC_BASER_BIT, u64s(10, 1, 2, 3, 4), u64s(notSet), u64s(7, 7, notSet)))
	if err != nil || f.Active != "baser" || len(f.Corrected.Lanes) != 4 || f.Corrected.Lanes[3] != 4 || f.Uncorrectable.OK ||
		f.CorrBits.Total != 7 || len(f.CorrBits.Lanes) != 1 {
		t.Errorf("%+v %v", f, err)
	}
	if _, err := DecodeFECReply(fecReply(t, 0, []byte{1, 2, 3}, nil, nil)); err == nil {
		t.Error("odd-sized statistic accepted")
	}
}

func TestEEPROMRequestReply(t *testing.T) {
	req, err := EncodeModuleEEPROMRequest("eth3", 128, 128, 0x11, 0)
	if err != nil {
		t.Fatal(err)
	}
	ad, err := netlink.NewAttributeDecoder(req)
	if err != nil {
		t.Fatal(err)
	}
	got := map[uint16]uint32{}
	name := ""
	for ad.Next() {
		switch ad.Type() {
		case aModuleEEPROMHeader:
			ad.Nested(func(n *netlink.AttributeDecoder) error {
				for n.Next() {
					if n.Type() == unix.ETHTOOL_A_HEADER_DEV_NAME {
						name = n.String()
					}
				}
				return nil
			})
		case aModuleEEPROMOffset, aModuleEEPROMLength:
			got[ad.Type()] = ad.Uint32()
		case aModuleEEPROMPage, aModuleEEPROMBank, aModuleEEPROMI2CAddress:
			got[ad.Type()] = uint32(ad.Uint8())
		}
	}
	if name != "eth3" || got[aModuleEEPROMOffset] != 128 || got[aModuleEEPROMLength] != 128 || got[aModuleEEPROMPage] != 0x11 ||
		got[aModuleEEPROMI2CAddress] != 0x50 {
		t.Errorf("request %q %v", name, got)
	}
	ae := netlink.NewAttributeEncoder()
	header(ae, aModuleEEPROMHeader, "eth3", 0)
	ae.Bytes(aModuleEEPROMData, bytes.Repeat([]byte{0x19}, 128))
	rep, _ := ae.Encode()
	data, err := DecodeModuleEEPROMReply(rep)
	if err != nil || len(data) != 128 || data[0] != 0x19 {
		t.Errorf("reply %d bytes, %v", len(data), err)
	}
	if _, err := DecodeModuleEEPROMReply(req); err == nil {
		t.Error("reply without data accepted")
	}
}

func FuzzDecodeFECReply(f *testing.F) {
	f.Add(fecReply(f, unix.ETHTOOL_LINK_MODE_FEC_RS_BIT, u64s(1), u64s(0), nil))
	f.Add(fecReply(f, unix.ETHTOOL_LINK_MODE_FEC_BASER_BIT, u64s(10, 1, 2, 3, 4), u64s(notSet), u64s(7, 7)))
	f.Fuzz(func(t *testing.T, b []byte) {
		fec, err := DecodeFECReply(b)
		if err == nil && len(fec.Corrected.Lanes) > len(b)/8 {
			t.Fatalf("%d lanes from %d bytes", len(fec.Corrected.Lanes), len(b))
		}
		DecodeModuleEEPROMReply(b)
	})
}
