//go:build linux

package devlinknl

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/mdlayher/genetlink"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// DefaultTimeout bounds a request when its context has no earlier deadline.
const DefaultTimeout = 5 * time.Second

// maxPending bounds the requests left blocked in the kernel (one per
// device and request kind): beyond it, requests fail at once.
const maxPending = 64

// maxAnswers bounds the answers of one dump that are decoded (a kernel
// before 6.6 answers every instance's reporters to a dump with a handle).
const maxAnswers = 4096

// Client sends devlink requests, each on its own generic netlink socket in
// its own goroutine (see the package comment). Safe for concurrent use.
type Client struct {
	dial func() (*genetlink.Conn, error) // replaced in tests (genltest)
	// noDeadline: the socket takes no deadline (genltest's fake); a real
	// one always does.
	noDeadline bool

	mu      sync.Mutex
	pending map[string]time.Time // request key -> when it was sent
	// perReporter: ask each known reporter of an instance on its own
	// (a do request, under that instance's lock only) instead of the dump
	// (kernels before 6.6 walk every instance, each under its lock, to
	// answer a dump with a handle: one wedged HCA blocks every other's
	// dump). known holds the reporters found per instance.
	perReporter bool
	known       map[Handle]knownReporters
}

// knownReporters are the reporters of an instance the client asks one by
// one. full: a dump found them (port reporters included); else they are
// the device reporters that answered their names (ProbeReporters) while
// no dump has answered yet.
type knownReporters struct {
	reporters []Reporter
	full      bool
}

// ProbeReporters are the device (port-less) health reporters asked by name
// on a kernel before 6.6 before any dump has answered for an instance: the
// dump there waits for every other instance's lock, so an HCA wedged when
// the exporter starts would otherwise keep every other HCA's first answer
// back (and its fw_fatal state unread). mlx5_core registers "fw" and
// "fw_fatal" (health.c) and "vnic" (diag/reporter_vnic.c, Linux 6.5+); a
// name the device does not have answers EINVAL and is skipped. Port
// reporters (mlx5e's tx and rx) come from the first dump that answers.
var ProbeReporters = []string{"fw", "fw_fatal", "vnic"}

// NewClient returns a client.
func NewClient() *Client {
	c := &Client{dial: func() (*genetlink.Conn, error) { return genetlink.Dial(nil) }}
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		c.perReporter = DumpWalksAll(unix.ByteSliceToString(u.Release[:]))
	}
	return c
}

// HealthReporters returns the health reporters of an instance and of its
// ports, at most MaxReporters, in the kernel's order.
//
// Before 6.6 (perReporter) each known reporter is asked with its own do
// request; before a dump has answered for the instance, the known ones are
// ProbeReporters, and a dump is tried after them under the same deadline:
// when it answers its reporters are returned and known from then on; when
// another instance's lock holds it, the probed reporters are returned (the
// dump is asked again at the next call, or at once fails while the earlier
// one is still blocked in the kernel).
func (c *Client) HealthReporters(ctx context.Context, h Handle) ([]Reporter, error) {
	if !c.perReporter {
		return c.dumpReporters(ctx, h, "health ")
	}
	c.mu.Lock()
	k, ok := c.known[h]
	c.mu.Unlock()
	ask := k.reporters
	if !ok || len(ask) == 0 {
		ask = make([]Reporter, 0, len(ProbeReporters))
		for _, n := range ProbeReporters {
			ask = append(ask, Reporter{Name: n})
		}
	}
	rs, gone, err := c.eachReporter(ctx, h, ask)
	if err != nil {
		return nil, err
	}
	if k.full && !gone {
		return rs, nil
	}
	// Not dumped yet, or a reporter went (the driver re-registered them).
	out, derr := c.dumpReporters(ctx, h, "dump ")
	if derr == nil {
		c.remember(h, knownReporters{reporters: out, full: true})
		return out, nil
	}
	if errors.Is(derr, ErrNoDevice) {
		return nil, derr
	}
	if len(rs) == 0 {
		return nil, derr // none of the names is the driver's: the dump's answer
	}
	c.remember(h, knownReporters{reporters: rs})
	return rs, nil
}

func (c *Client) remember(h Handle, k knownReporters) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.known == nil {
		c.known = map[Handle]knownReporters{}
	}
	if len(c.known) >= maxPending && c.known[h].reporters == nil {
		clear(c.known) // bounded: instances come and go (VFs, reloads)
	}
	c.known[h] = k
}

// eachReporter asks each of known's reporters of h with a do request. A
// reporter the instance no longer has (EINVAL: the kernel's answer to a
// name it does not know) is left out and reported as gone.
func (c *Client) eachReporter(ctx context.Context, h Handle, known []Reporter) (out []Reporter, gone bool, err error) {
	err = c.do(ctx, "health "+h.String(), func(conn *genetlink.Conn, fam genetlink.Family) error {
		for _, k := range known {
			ae := netlink.NewAttributeEncoder()
			ae.String(attrBusName, h.Bus)
			ae.String(attrDevName, h.Device)
			if k.HasPort {
				ae.Uint32(attrPortIndex, k.Port)
			}
			ae.String(attrHealthReporterName, k.Name)
			req, err := ae.Encode()
			if err != nil {
				return err
			}
			msgs, err := conn.Execute(genetlink.Message{
				Header: genetlink.Header{Command: cmdHealthReporterGet, Version: familyVersion}, Data: req,
			}, fam.ID, netlink.Request)
			if errors.Is(err, syscall.EINVAL) {
				gone = true
				continue
			}
			if err != nil {
				return err
			}
			if len(msgs) != 1 {
				return fmt.Errorf("devlink health reporter %s of %s: %d answers", k.Name, h, len(msgs))
			}
			got, r, err := DecodeReporter(msgs[0].Data)
			if err != nil {
				return err
			}
			if got != h || r.Name != k.Name {
				return fmt.Errorf("devlink health reporter %s of %s answered for %s %s", k.Name, h, got, r.Name)
			}
			out = append(out, r)
		}
		return nil
	})
	if err != nil {
		return nil, false, err
	}
	return out, gone, nil
}

// dumpReporters dumps the reporters of h (and, before 6.6, every other
// instance's, filtered out).
func (c *Client) dumpReporters(ctx context.Context, h Handle, key string) ([]Reporter, error) {
	var out []Reporter
	err := c.do(ctx, key+h.String(), func(conn *genetlink.Conn, fam genetlink.Family) error {
		req, err := encodeHandle(h)
		if err != nil {
			return err
		}
		msgs, err := conn.Execute(genetlink.Message{
			Header: genetlink.Header{Command: cmdHealthReporterGet, Version: familyVersion}, Data: req,
		}, fam.ID, netlink.Request|netlink.Dump)
		if err != nil {
			return err
		}
		var rs []Reporter
		for i, m := range msgs {
			if i == maxAnswers {
				break
			}
			got, r, err := DecodeReporter(m.Data)
			if err != nil {
				return err
			}
			if got == h && len(rs) < MaxReporters { // before 6.6: the whole dump
				rs = append(rs, r)
			}
		}
		if len(rs) > 0 {
			out = rs
			return nil
		}
		// No reporter: does the instance exist? (A kernel before 6.6
		// answers a dump with an unknown handle with the other
		// instances' reporters, or none.)
		_, err = conn.Execute(genetlink.Message{
			Header: genetlink.Header{Command: cmdGet, Version: familyVersion}, Data: req,
		}, fam.ID, netlink.Request)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Info returns the devlink information of an instance.
func (c *Client) Info(ctx context.Context, h Handle) (Info, error) {
	var info Info
	err := c.do(ctx, "info "+h.String(), func(conn *genetlink.Conn, fam genetlink.Family) error {
		req, err := encodeHandle(h)
		if err != nil {
			return err
		}
		msgs, err := conn.Execute(genetlink.Message{
			Header: genetlink.Header{Command: cmdInfoGet, Version: familyVersion}, Data: req,
		}, fam.ID, netlink.Request)
		if err != nil {
			return err
		}
		if len(msgs) != 1 {
			return fmt.Errorf("devlink info of %s: %d answers", h, len(msgs))
		}
		got, i, err := DecodeInfo(msgs[0].Data)
		if err != nil {
			return err
		}
		if got != h {
			return fmt.Errorf("devlink info of %s answered for %s", h, got)
		}
		info = i
		return nil
	})
	if err != nil { // info may still be written by a blocked request
		return Info{}, err
	}
	return info, nil
}

// do runs one request in a goroutine and waits for it until the context's
// deadline or DefaultTimeout. A request left blocked keeps its key pending
// until the kernel lets it go; meanwhile requests with that key fail at
// once with ErrTimeout.
func (c *Client) do(ctx context.Context, key string, fn func(*genetlink.Conn, genetlink.Family) error) error {
	now := time.Now()
	c.mu.Lock()
	if since, ok := c.pending[key]; ok {
		c.mu.Unlock()
		return fmt.Errorf("%w: the request sent %s ago is still blocked in the kernel", ErrTimeout, now.Sub(since).Round(time.Second))
	}
	if len(c.pending) >= maxPending {
		c.mu.Unlock()
		return fmt.Errorf("%w: %d requests are blocked in the kernel", ErrTimeout, maxPending)
	}
	if c.pending == nil {
		c.pending = map[string]time.Time{}
	}
	c.pending[key] = now
	c.mu.Unlock()

	deadline := now.Add(DefaultTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	done := make(chan error, 1)
	go func() {
		err := c.exchange(deadline, fn)
		c.mu.Lock()
		delete(c.pending, key)
		c.mu.Unlock()
		done <- err
	}()
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case err := <-done:
		return MapError(err)
	case <-t.C:
	case <-ctx.Done():
	}
	select { // an answer and the deadline at once: take the answer
	case err := <-done:
		return MapError(err)
	default:
		return fmt.Errorf("%w (%s)", ErrTimeout, key)
	}
}

// exchange opens a socket, looks the family up and runs fn.
func (c *Client) exchange(deadline time.Time, fn func(*genetlink.Conn, genetlink.Family) error) error {
	conn, err := c.dial()
	if err != nil {
		return fmt.Errorf("opening generic netlink socket: %w", err)
	}
	defer conn.Close()
	if !c.noDeadline {
		if err := conn.SetDeadline(deadline); err != nil {
			return err
		}
	}
	fam, err := conn.GetFamily(familyName)
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%w: no %q generic netlink family (a kernel without CONFIG_NET_DEVLINK)", ErrNotAvailable, familyName)
	}
	if err != nil {
		return fmt.Errorf("devlink family: %w", err)
	}
	return fn(conn, fam)
}

// Pending returns how many requests are blocked in the kernel.
func (c *Client) Pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.pending)
}
