//go:build linux

package rdmanl

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// DefaultTimeout bounds the device dump, PerDeviceTimeout each device's
// queue-pair dump, when ctx has no earlier deadline.
const (
	DefaultTimeout   = 2 * time.Second
	PerDeviceTimeout = 2 * time.Second
)

// Client lists queue pairs over one RDMA netlink socket (a Source), opened on first
// use and again after a socket error. Safe for concurrent use (listings
// are serialised).
type Client struct {
	mu   sync.Mutex
	c    *netlink.Conn
	dial func() (*netlink.Conn, error) // replaced in tests (nltest)
	// noDeadline: the socket takes no deadline (nltest's fake); a real
	// one always does.
	noDeadline bool
}

// NewClient returns a client; the socket is opened by the first listing.
func NewClient() *Client {
	return &Client{dial: func() (*netlink.Conn, error) { return netlink.Dial(unix.NETLINK_RDMA, nil) }}
}

// QueuePairs dumps the devices, then the queue pairs of each. Errors are
// mapped by MapError; no device is ErrNotAvailable.
func (c *Client) QueuePairs(ctx context.Context) (Listing, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	l, err := c.list(ctx)
	if err != nil {
		var oe *netlink.OpError
		if c.c != nil && !errors.As(err, &oe) { // a socket error: open a new one next time
			c.c.Close()
			c.c = nil
		}
		return Listing{}, MapError(err)
	}
	return l, nil
}

func (c *Client) list(ctx context.Context) (Listing, error) {
	var l Listing
	if c.c == nil {
		conn, err := c.dial()
		if err != nil {
			return l, fmt.Errorf("opening RDMA netlink socket: %w", err)
		}
		c.c = conn
	}
	deadline := time.Now().Add(DefaultTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	if !c.noDeadline {
		if err := c.c.SetDeadline(deadline); err != nil {
			return l, err
		}
	}
	msgs, err := c.c.Execute(netlink.Message{Header: netlink.Header{
		Type: msgType(clientNLDEV, cmdGet), Flags: netlink.Request | netlink.Dump,
	}})
	if err != nil {
		return l, fmt.Errorf("RDMA netlink device dump: %w", err)
	}
	for _, m := range msgs {
		if len(l.Devices) >= MaxDevices {
			break
		}
		d, err := DecodeDevice(m.Data)
		if err != nil {
			return l, err
		}
		l.Devices = append(l.Devices, d)
	}
	if len(l.Devices) == 0 {
		return l, fmt.Errorf("%w: no RDMA device", ErrNotAvailable)
	}
	// Each device's queue pairs on their own: mlx5 fails QUERY_QP of a
	// device in internal error, and a wedged device's dump can outlast the
	// deadline; either loses that device's queue pairs only (Failed), the
	// others are listed, over a new socket where the old one timed out.
	for _, d := range l.Devices {
		if err := ctx.Err(); err != nil {
			return l, err
		}
		if err := c.listDevice(ctx, &l, d); err != nil {
			l.Failed = append(l.Failed, DeviceError{Device: d.Name, Err: MapError(err)})
			var oe *netlink.OpError
			if c.c != nil && !errors.As(err, &oe) {
				c.c.Close() // a socket error: the rest over a new one
				c.c = nil
			}
		}
	}
	if len(l.Failed) == len(l.Devices) {
		return l, l.Failed[0].Err
	}
	return l, nil
}

// listDevice appends one device's queue pairs, within PerDeviceTimeout.
func (c *Client) listDevice(ctx context.Context, l *Listing, d Device) error {
	if c.c == nil {
		conn, err := c.dial()
		if err != nil {
			return fmt.Errorf("opening RDMA netlink socket: %w", err)
		}
		c.c = conn
	}
	if !c.noDeadline {
		deadline := time.Now().Add(PerDeviceTimeout)
		if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
			deadline = dl
		}
		if err := c.c.SetDeadline(deadline); err != nil {
			return err
		}
	}
	ae := netlink.NewAttributeEncoder()
	ae.Uint32(attrDevIndex, d.Index)
	req, err := ae.Encode()
	if err != nil {
		return err
	}
	msgs, err := c.c.Execute(netlink.Message{Header: netlink.Header{
		Type: msgType(clientNLDEV, cmdResQPGet), Flags: netlink.Request | netlink.Dump,
	}, Data: req})
	if err != nil {
		return fmt.Errorf("RDMA netlink queue-pair dump of %s: %w", d.Name, err)
	}
	kept := len(l.QPs)
	dropped := 0
	for _, m := range msgs {
		var n int
		if l.QPs, n, err = DecodeQPs(m.Data, l.QPs, MaxQPs); err != nil {
			l.QPs = l.QPs[:kept] // none of this device's, rather than some
			return fmt.Errorf("queue pairs of %s: %w", d.Name, err)
		}
		dropped += n
	}
	l.Dropped += dropped
	return nil
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
