// Package ethtoolnl speaks the two requests of the kernel's ethtool
// generic-netlink family that fabric_exporter needs and that no maintained
// Go library covers (github.com/mdlayher/ethtool reads FEC settings but not
// their statistics; github.com/safchain/ethtool reads module memory only
// through the legacy ioctl, which cannot address CMIS pages or banks):
//
//   - ETHTOOL_MSG_MODULE_EEPROM_GET (Linux 5.13+): a window of a module's
//     memory by page, bank and I2C address, what `ethtool -m` uses;
//   - ETHTOOL_MSG_FEC_GET with ETHTOOL_FLAG_STATS (Linux 5.13+): the active
//     FEC mode and the IEEE 802.3 FEC counters (corrected and uncorrectable
//     blocks, corrected bits), in total and per lane where the driver
//     gives them, what `ethtool -I --show-fec` prints.
//
// Message layouts are those of Documentation/networking/ethtool-netlink.rst
// and include/uapi/linux/ethtool_netlink.h. The generic-netlink transport is
// github.com/mdlayher/genetlink.
package ethtoolnl

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// Attribute numbers of include/uapi/linux/ethtool_netlink.h that
// golang.org/x/sys/unix does not define.
const (
	aModuleEEPROMHeader     = 1
	aModuleEEPROMOffset     = 2
	aModuleEEPROMLength     = 3
	aModuleEEPROMPage       = 4
	aModuleEEPROMBank       = 5
	aModuleEEPROMI2CAddress = 6
	aModuleEEPROMData       = 7

	aFECHeader = 1
	aFECModes  = 2
	aFECAuto   = 3
	aFECActive = 4
	aFECStats  = 5

	aFECStatPad       = 1
	aFECStatCorrected = 2
	aFECStatUncorr    = 3
	aFECStatCorrBits  = 4
)

// I2CAddress is the module memory's address (SFF-8636, CMIS: 0x50).
const I2CAddress = 0x50

// Counter is one FEC statistic: the total and, when the driver reports
// them, the per-lane values.
type Counter struct {
	Total uint64
	OK    bool
	Lanes []uint64
}

// FEC is the reply to a FEC request with statistics.
type FEC struct {
	// Active is the active FEC mode: "off", "rs", "baser", "llrs", or ""
	// when the driver does not say.
	Active                             string
	Corrected, Uncorrectable, CorrBits Counter
}

func header(ae *netlink.AttributeEncoder, typ uint16, ifname string, flags uint32) {
	ae.Nested(typ, func(nae *netlink.AttributeEncoder) error {
		nae.String(unix.ETHTOOL_A_HEADER_DEV_NAME, ifname)
		if flags != 0 {
			nae.Uint32(unix.ETHTOOL_A_HEADER_FLAGS, flags)
		}
		return nil
	})
}

// EncodeModuleEEPROMRequest builds the attributes of a module-EEPROM get.
func EncodeModuleEEPROMRequest(ifname string, offset, length uint32, page, bank uint8) ([]byte, error) {
	ae := netlink.NewAttributeEncoder()
	header(ae, aModuleEEPROMHeader, ifname, 0)
	ae.Uint32(aModuleEEPROMOffset, offset)
	ae.Uint32(aModuleEEPROMLength, length)
	ae.Uint8(aModuleEEPROMPage, page)
	ae.Uint8(aModuleEEPROMBank, bank)
	ae.Uint8(aModuleEEPROMI2CAddress, I2CAddress)
	return ae.Encode()
}

// DecodeModuleEEPROMReply returns the data of a module-EEPROM reply.
func DecodeModuleEEPROMReply(b []byte) ([]byte, error) {
	ad, err := netlink.NewAttributeDecoder(b)
	if err != nil {
		return nil, err
	}
	var data []byte
	for ad.Next() {
		if ad.Type() == aModuleEEPROMData {
			data = ad.Bytes()
		}
	}
	if err := ad.Err(); err != nil {
		return nil, err
	}
	if data == nil {
		return nil, errors.New("module EEPROM reply without data")
	}
	return data, nil
}

// EncodeFECRequest builds the attributes of a FEC get with statistics.
func EncodeFECRequest(ifname string) ([]byte, error) {
	ae := netlink.NewAttributeEncoder()
	header(ae, aFECHeader, ifname, unix.ETHTOOL_FLAG_STATS)
	return ae.Encode()
}

// fecModes maps the link-mode bit of ETHTOOL_A_FEC_ACTIVE to a name.
var fecModes = map[uint32]string{
	unix.ETHTOOL_LINK_MODE_FEC_NONE_BIT:  "off",
	unix.ETHTOOL_LINK_MODE_FEC_RS_BIT:    "rs",
	unix.ETHTOOL_LINK_MODE_FEC_BASER_BIT: "baser",
	unix.ETHTOOL_LINK_MODE_FEC_LLRS_BIT:  "llrs",
}

// notSet is ETHTOOL_STAT_NOT_SET: a statistic the driver does not fill.
const notSet = ^uint64(0)

func counter(b []byte) (Counter, error) {
	if len(b) == 0 || len(b)%8 != 0 {
		return Counter{}, fmt.Errorf("FEC statistic of %d bytes", len(b))
	}
	c := Counter{Total: binary.NativeEndian.Uint64(b), OK: true}
	if c.Total == notSet {
		return Counter{}, nil
	}
	for i := 8; i+8 <= len(b); i += 8 {
		v := binary.NativeEndian.Uint64(b[i:])
		if v == notSet {
			break
		}
		c.Lanes = append(c.Lanes, v)
	}
	return c, nil
}

// DecodeFECReply decodes a FEC reply.
func DecodeFECReply(b []byte) (FEC, error) {
	var f FEC
	ad, err := netlink.NewAttributeDecoder(b)
	if err != nil {
		return f, err
	}
	for ad.Next() {
		switch ad.Type() {
		case aFECActive:
			if m, ok := fecModes[ad.Uint32()]; ok {
				f.Active = m
			}
		case aFECStats:
			ad.Nested(func(nad *netlink.AttributeDecoder) error {
				for nad.Next() {
					var dst *Counter
					switch nad.Type() {
					case aFECStatCorrected:
						dst = &f.Corrected
					case aFECStatUncorr:
						dst = &f.Uncorrectable
					case aFECStatCorrBits:
						dst = &f.CorrBits
					default:
						continue
					}
					c, err := counter(nad.Bytes())
					if err != nil {
						return err
					}
					*dst = c
				}
				return nil
			})
		}
	}
	return f, ad.Err()
}
