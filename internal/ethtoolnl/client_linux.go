//go:build linux

package ethtoolnl

import (
	"errors"
	"fmt"
	"sync"

	"github.com/mdlayher/genetlink"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// Client sends ethtool netlink requests over one generic-netlink socket,
// opened on first use and again after an error. Safe for concurrent use
// (requests are serialised).
type Client struct {
	mu  sync.Mutex
	c   *genetlink.Conn
	fam genetlink.Family
}

// NewClient returns a client; the socket is opened by the first request.
func NewClient() *Client { return &Client{} }

func (c *Client) conn() error {
	if c.c != nil {
		return nil
	}
	conn, err := genetlink.Dial(nil)
	if err != nil {
		return fmt.Errorf("opening generic netlink socket: %w", err)
	}
	fam, err := conn.GetFamily(unix.ETHTOOL_GENL_NAME)
	if err != nil {
		conn.Close()
		return fmt.Errorf("ethtool netlink family: %w", err)
	}
	c.c, c.fam = conn, fam
	return nil
}

func (c *Client) execute(cmd uint8, attrs []byte) ([]byte, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.conn(); err != nil {
		return nil, err
	}
	msgs, err := c.c.Execute(genetlink.Message{
		Header: genetlink.Header{Command: cmd, Version: c.fam.Version}, Data: attrs,
	}, c.fam.ID, netlink.Request)
	if err != nil {
		var oe *netlink.OpError
		if !errors.As(err, &oe) { // a socket error: open a new one next time
			c.c.Close()
			c.c = nil
		}
		return nil, err
	}
	if len(msgs) != 1 {
		return nil, fmt.Errorf("ethtool netlink: %d replies", len(msgs))
	}
	return msgs[0].Data, nil
}

// ReadModuleEEPROM reads length bytes of a module's memory at offset
// (0-127 lower page, 128-255 the upper page of page/bank).
func (c *Client) ReadModuleEEPROM(ifname string, offset, length uint32, page, bank uint8) ([]byte, error) {
	req, err := EncodeModuleEEPROMRequest(ifname, offset, length, page, bank)
	if err != nil {
		return nil, err
	}
	rep, err := c.execute(unix.ETHTOOL_MSG_MODULE_EEPROM_GET, req)
	if err != nil {
		return nil, err
	}
	return DecodeModuleEEPROMReply(rep)
}

// FEC reads the active FEC mode and its statistics.
func (c *Client) FEC(ifname string) (FEC, error) {
	req, err := EncodeFECRequest(ifname)
	if err != nil {
		return FEC{}, err
	}
	rep, err := c.execute(unix.ETHTOOL_MSG_FEC_GET, req)
	if err != nil {
		return FEC{}, err
	}
	return DecodeFECReply(rep)
}

// Close closes the socket.
func (c *Client) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.c == nil {
		return nil
	}
	err := c.c.Close()
	c.c = nil
	return err
}
