package ncclras

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// DefaultAddr is NCCL's default RAS client address (NCCL_RAS_ADDR).
const DefaultAddr = "localhost:28028"

// ClientProtocol is the protocol version the client announces (NCCL's
// NCCL_RAS_CLIENT_PROTOCOL, 2 from 2.24 to 2.29).
const ClientProtocol = 2

// DefaultMaxAnswer bounds an answer. JSON costs about 600 bytes per rank
// and communicator: a TP16 job with 4 communicators answers 35 KB,
// 1024 ranks in 4 communicators 2.2 MB (jobAnswer in bench_test.go).
const DefaultMaxAnswer = 4 << 20

// maxLine bounds a handshake answer line.
const maxLine = 1024

// DefaultTimeout bounds a whole query when Options.Timeout is 0. A STATUS
// runs one RAS collective, RAS_COLL_COMMS (rasClientRunInit in
// client_support.cc starts the RAS_COLL_CONNS one only inside "#if 0",
// 2.24.3 to 2.30.7), which RAS ends after its leg timeout plus an extra
// timeout at the latest: RAS_COLLECTIVE_LEG_TIMEOUT_SEC 5 s and
// RAS_COLLECTIVE_EXTRA_TIMEOUT_SEC 5 s, both times NCCL_RAS_TIMEOUT_FACTOR
// (ras_internal.h; rasCollsHandleTimeouts in collectives.cc gives up
// after coll->timeout + RAS_COLLECTIVE_EXTRA_TIMEOUT). NCCL's own ncclras
// client waits that long plus 1 s for each read (client.cc: tv.tv_sec +=
// RAS_COLLECTIVE_LEG_TIMEOUT_SEC + RAS_COLLECTIVE_EXTRA_TIMEOUT_SEC after
// 1 s). 30 s leaves RAS its 10 s with a timeout factor up to 2 and the
// handshake's and the answer's own time, so that RAS reports the peers
// that do not answer (INCOMPLETE, timeouts_count) before the client gives
// up on the whole answer. A caller that cannot wait that long sets
// RASTimeout too, so that RAS answers within Timeout.
const DefaultTimeout = 30 * time.Second

// Options configures Query.
type Options struct {
	// Timeout bounds the whole query, from dial to the answer's end
	// (default DefaultTimeout). Every step also ends at this deadline.
	Timeout time.Duration
	// RASTimeout, when positive, is sent as "TIMEOUT <s>" in whole seconds
	// (truncated, at least 1): RAS's collective leg timeout for this query,
	// replacing 5 s × NCCL_RAS_TIMEOUT_FACTOR (the extra 5 s × factor
	// still follows it). 0, the default, sends no TIMEOUT, as NCCL's
	// ncclras client without -t does; RAS keeps its own default. (TIMEOUT
	// 0 would turn RAS's timeout off: never sent.)
	RASTimeout time.Duration
	// MaxAnswer bounds the answer's size (default DefaultMaxAnswer).
	MaxAnswer int64
	// Verbose asks VERBOSE STATUS (more outliers named in text).
	Verbose bool
	// Text asks the text answer even where JSON is offered.
	Text bool
	// Dial replaces net.Dialer's DialContext (tests).
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
}

// Error is a failed query: Step names where ("dial", "handshake",
// "timeout", "format", "status", "answer", "parse").
type Error struct {
	Addr, Step string
	Err        error
}

func (e *Error) Error() string { return "ncclras " + e.Addr + ": " + e.Step + ": " + e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// ErrTooLarge is returned when an answer exceeds Options.MaxAnswer.
var ErrTooLarge = errors.New("answer exceeds the size bound")

// Refused reports whether err is a refused connection: nothing listens on
// the address (no NCCL process on this host, or RAS disabled).
func Refused(err error) bool { return errors.Is(err, syscall.ECONNREFUSED) }

// Query asks the RAS service at addr for its STATUS: JSON where the
// server accepts SET FORMAT json (NCCL 2.28.7+), text otherwise. It sends
// TIMEOUT only when o.RASTimeout is set.
func Query(ctx context.Context, addr string, o Options) (*Status, error) {
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.MaxAnswer <= 0 {
		o.MaxAnswer = DefaultMaxAnswer
	}
	deadline := time.Now().Add(o.Timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	fail := func(step string, err error) (*Status, error) {
		return nil, &Error{Addr: addr, Step: step, Err: err}
	}
	dial := o.Dial
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	conn, err := dial(ctx, "tcp", addr)
	if err != nil {
		return fail("dial", err)
	}
	defer conn.Close()
	// The context's end (Close of the collector) also ends a blocked read.
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if err := conn.SetDeadline(deadline); err != nil {
		return fail("dial", err)
	}
	br := bufio.NewReaderSize(conn, 4096)

	line, err := exchange(conn, br, "CLIENT PROTOCOL "+strconv.Itoa(ClientProtocol))
	if err != nil {
		return fail("handshake", err)
	}
	rest, ok := cutPrefixFold(line, "SERVER PROTOCOL ")
	proto, perr := strconv.Atoi(strings.TrimSpace(rest))
	if !ok || perr != nil || proto < 1 {
		return fail("handshake", fmt.Errorf("unexpected answer %q", trunc(line)))
	}
	if o.RASTimeout > 0 {
		secs := max(int64(o.RASTimeout/time.Second), 1)
		if line, err = exchange(conn, br, "TIMEOUT "+strconv.FormatInt(secs, 10)); err != nil {
			return fail("timeout", err)
		}
		if !strings.EqualFold(line, "OK") {
			return fail("timeout", fmt.Errorf("unexpected answer %q", trunc(line)))
		}
	}
	format := "text"
	if !o.Text {
		if line, err = exchange(conn, br, "SET FORMAT json"); err != nil {
			return fail("format", err)
		}
		switch {
		case strings.EqualFold(line, "OK"):
			format = "json"
		case strings.HasPrefix(line, "ERROR"):
			// Before 2.28.7: "ERROR: Unknown command SET FORMAT json".
		default:
			return fail("format", fmt.Errorf("unexpected answer %q", trunc(line)))
		}
	}
	cmd := "STATUS"
	if o.Verbose {
		cmd = "VERBOSE STATUS"
	}
	if _, err := io.WriteString(conn, cmd+"\n"); err != nil {
		return fail("status", err)
	}
	data, err := io.ReadAll(io.LimitReader(br, o.MaxAnswer+1))
	if err != nil {
		return fail("answer", err)
	}
	if int64(len(data)) > o.MaxAnswer {
		return fail("answer", fmt.Errorf("%w (%d bytes)", ErrTooLarge, o.MaxAnswer))
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return fail("answer", errors.New("empty answer"))
	}
	var st *Status
	if format == "json" {
		st, err = ParseJSON(data)
	} else {
		st, err = ParseText(data)
	}
	if err != nil {
		return fail("parse", err)
	}
	st.Protocol = proto
	return st, nil
}

// exchange sends one command line and reads the one-line answer (at most
// maxLine bytes), without its newline.
func exchange(conn net.Conn, br *bufio.Reader, cmd string) (string, error) {
	if _, err := io.WriteString(conn, cmd+"\n"); err != nil {
		return "", err
	}
	var b []byte
	for {
		frag, err := br.ReadSlice('\n')
		b = append(b, frag...)
		if len(b) > maxLine {
			return "", fmt.Errorf("answer line over %d bytes", maxLine)
		}
		if err == nil {
			break
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if errors.Is(err, io.EOF) {
			return "", errors.New("connection closed by the server")
		}
		return "", err
	}
	return strings.TrimRight(string(b), "\r\n"), nil
}

func cutPrefixFold(s, prefix string) (string, bool) {
	if len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix) {
		return s[len(prefix):], true
	}
	return "", false
}
