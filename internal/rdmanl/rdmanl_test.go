package rdmanl

import (
	"context"
	"encoding/binary"
	"errors"
	"syscall"
	"testing"

	"github.com/mdlayher/netlink"
	"github.com/mdlayher/netlink/nltest"

	"github.com/fabric-exporter/fabric_exporter/internal/nlattr"
)

// Attributes as the kernel lays them out (internal/nlattr); a nest
// (nla_nest_start) carries NLA_F_NESTED on kernels since 5.2.
var (
	nla  = nlattr.Attr
	u8   = nlattr.U8
	u32  = nlattr.U32
	str  = nlattr.Str
	cat  = nlattr.Cat
	nest = nlattr.Nest
)

// rcQP is a user RC QP in RTS as fill_res_qp_entry writes it: port, lqpn,
// rqpn, rq_psn, sq_psn, path_mig_state, type, state, pid.
func rcQP(port, lqpn, pid uint32) []byte {
	return nest(attrResQPEntry,
		u32(attrPortIndex, port), u32(attrResLQPN, lqpn), u32(22 /* RQPN */, lqpn+0x100),
		u32(23 /* RQ_PSN */, 0x5a1d), u32(24 /* SQ_PSN */, 0x3c2e), u8(25 /* PATH_MIG_STATE */, 2),
		u8(attrResType, 2 /* IB_QPT_RC */), u8(attrResState, 3 /* IB_QPS_RTS */), u32(attrResPID, pid))
}

// qpAnswer is one RDMA_NLDEV_CMD_RES_QP_GET answer: the device handle and
// the RES_QP table.
func qpAnswer(idx uint32, dev string, entries ...[]byte) []byte {
	return cat(u32(attrDevIndex, idx), str(attrDevName, dev), nest(attrResQP, entries...))
}

// A healthy NCCL process (pid 4242) with RC QPs on mlx5_0 and mlx5_3, and
// the kernel's GSI QP (QP1, owned by ib_core, no pid) on mlx5_0.
func healthy() map[uint32][]byte {
	return map[uint32][]byte{
		0: qpAnswer(0, "mlx5_0",
			nest(attrResQPEntry, u32(attrPortIndex, 1), u32(attrResLQPN, 1), u32(24, 0),
				u8(attrResType, 1 /* IB_QPT_GSI */), u8(attrResState, 3), str(attrResKernName, "ib_core")),
			rcQP(1, 0x1a4, 4242), rcQP(1, 0x1a5, 4242)),
		3: qpAnswer(3, "mlx5_3", rcQP(1, 0x2b0, 4242)),
	}
}

func TestDecodeQPs(t *testing.T) {
	h := healthy()
	qps, dropped, err := DecodeQPs(h[0], nil, MaxQPs)
	if err != nil || dropped != 0 || len(qps) != 3 {
		t.Fatalf("%+v %d %v", qps, dropped, err)
	}
	if q := qps[0]; q.Device != "mlx5_0" || q.HasPID || q.KernName != "ib_core" || q.TypeName() != "GSI" || q.LQPN != 1 {
		t.Errorf("kernel QP: %+v", q)
	}
	if q := qps[2]; q.Device != "mlx5_0" || !q.HasPID || q.PID != 4242 || q.Port != 1 || q.LQPN != 0x1a5 ||
		q.TypeName() != "RC" || q.StateName() != "RTS" || q.KernName != "" {
		t.Errorf("user QP: %+v", q)
	}
	qps, _, err = DecodeQPs(h[3], qps, MaxQPs)
	if err != nil || len(qps) != 4 || qps[3].Device != "mlx5_3" || qps[3].PID != 4242 {
		t.Fatalf("%+v %v", qps, err)
	}
	// The bound: entries beyond max are counted, not kept.
	qps, dropped, err = DecodeQPs(h[0], nil, 2)
	if err != nil || len(qps) != 2 || dropped != 1 {
		t.Errorf("bounded: %d kept, %d dropped, %v", len(qps), dropped, err)
	}
	// A nest without NLA_F_NESTED (kernels before 5.2) decodes the same.
	old := cat(u32(attrDevIndex, 1), str(attrDevName, "mlx5_1"), nla(attrResQP, nla(attrResQPEntry, cat(u32(attrResLQPN, 7), u32(attrResPID, 9))...)...))
	qps, _, err = DecodeQPs(old, nil, MaxQPs)
	if err != nil || len(qps) != 1 || qps[0].PID != 9 || qps[0].Device != "mlx5_1" || qps[0].Port != 0 {
		t.Errorf("old nest: %+v %v", qps, err)
	}
}

func TestDecodeUnknownAttribute(t *testing.T) {
	// Attributes of later kernels (RDMA_NLDEV_ATTR_RES_PDN = 40 in an
	// entry, driver details as a nest, a top-level one) are skipped.
	b := cat(u32(attrDevIndex, 0), str(attrDevName, "mlx5_0"), u32(300, 1),
		nest(attrResQP, nest(attrResQPEntry, u32(attrResLQPN, 0x1a4), u32(40, 3), nest(77, u32(1, 1)),
			u8(attrResType, 2), u8(attrResState, 3), u32(attrResPID, 4242)), u32(99, 5)))
	qps, _, err := DecodeQPs(b, nil, MaxQPs)
	if err != nil || len(qps) != 1 || qps[0].PID != 4242 || qps[0].LQPN != 0x1a4 {
		t.Errorf("%+v %v", qps, err)
	}
}

func TestDecodeTruncated(t *testing.T) {
	full := healthy()[0]
	prior := []QP{{Device: "mlx5_9", PID: 1, HasPID: true}}
	for _, n := range []int{len(full) - 1, len(full) - 9, 30, 3} {
		qps, _, err := DecodeQPs(full[:n], prior, MaxQPs)
		if err == nil {
			t.Errorf("%d of %d bytes: no error", n, len(full))
		}
		if len(qps) != 1 || qps[0].Device != "mlx5_9" {
			t.Errorf("%d bytes: a malformed message added QPs: %+v", n, qps)
		}
	}
	// A u32 attribute of the wrong size.
	if _, _, err := DecodeQPs(qpAnswer(0, "mlx5_0", nest(attrResQPEntry, nla(attrResPID, 1, 2))), nil, MaxQPs); err == nil {
		t.Error("a 2-byte pid accepted")
	}
	if _, err := DecodeDevice(u32(attrDevIndex, 1)); err == nil {
		t.Error("a device without a name accepted")
	}
}

func TestMapError(t *testing.T) {
	for _, c := range []struct {
		err  error
		want error
	}{
		{syscall.EPERM, ErrNoPrivilege},
		{&netlink.OpError{Op: "receive", Err: syscall.EACCES}, ErrNoPrivilege},
		{syscall.EPROTONOSUPPORT, ErrNotAvailable}, // socket(AF_NETLINK, .., NETLINK_RDMA) without ib_core
		{&netlink.OpError{Op: "receive", Err: syscall.EOPNOTSUPP}, ErrNotAvailable},
		{syscall.EINVAL, nil},
	} {
		got := MapError(c.err)
		if c.want == nil {
			if errors.Is(got, ErrNoPrivilege) || errors.Is(got, ErrNotAvailable) || !errors.Is(got, c.err) {
				t.Errorf("%v -> %v", c.err, got)
			}
			continue
		}
		if !errors.Is(got, c.want) || !errors.Is(got, c.err) {
			t.Errorf("%v -> %v, want %v", c.err, got, c.want)
		}
	}
}

// fakeKernel answers the device dump and the per-device QP dumps from
// answers (device index -> the QP answer), as nldev.c does; a QP dump
// without DEV_INDEX is EINVAL like res_get_common_dumpit.
func fakeKernel(t *testing.T, devs []Device, answers map[uint32][]byte, reqs *[]netlink.Message) *netlink.Conn {
	return nltest.Dial(kernelFunc(t, devs, answers, reqs))
}

func kernelFunc(t *testing.T, devs []Device, answers map[uint32][]byte, reqs *[]netlink.Message) nltest.Func {
	return func(in []netlink.Message) ([]netlink.Message, error) {
		*reqs = append(*reqs, in...)
		req := in[0]
		if req.Header.Flags&netlink.Dump == 0 {
			t.Errorf("request without NLM_F_DUMP: %v", req.Header.Flags)
		}
		var out []netlink.Message
		switch req.Header.Type {
		case 5<<10 + 1:
			for _, d := range devs {
				out = append(out, netlink.Message{Header: netlink.Header{Type: req.Header.Type},
					Data: cat(u32(attrDevIndex, d.Index), str(attrDevName, d.Name), u32(attrPortIndex, 1))})
			}
		case 5<<10 + 10:
			if len(req.Data) != 8 || binary.NativeEndian.Uint16(req.Data[2:]) != attrDevIndex {
				return errReply(syscall.EINVAL, in)
			}
			idx := binary.NativeEndian.Uint32(req.Data[4:])
			if a, ok := answers[idx]; ok {
				out = append(out, netlink.Message{Header: netlink.Header{Type: req.Header.Type}, Data: a})
			}
		default:
			return errReply(syscall.EOPNOTSUPP, in)
		}
		return multipart(out, req)
	}
}

// multipart marks answers NLM_F_MULTI and ends them with NLMSG_DONE and
// its int error 0, as netlink_dump_done writes it.
func multipart(msgs []netlink.Message, req netlink.Message) ([]netlink.Message, error) {
	msgs = append(msgs, netlink.Message{Header: netlink.Header{Type: netlink.Done}, Data: make([]byte, 4)})
	for i := range msgs {
		msgs[i].Header.Flags |= netlink.Multi
		msgs[i].Header.Sequence, msgs[i].Header.PID = req.Header.Sequence, req.Header.PID
	}
	return msgs, nil
}

// errReply is the kernel's NLMSG_ERROR (netlink_ack): struct nlmsgerr, the
// negative errno and the request's header, without extended-ack flags
// (nltest.Error copies the request's flags, and a dump's NLM_F_MATCH is
// NLM_F_ACK_TLVS's bit in an answer).
func errReply(errno syscall.Errno, in []netlink.Message) ([]netlink.Message, error) {
	hdr, err := netlink.Message{Header: in[0].Header}.MarshalBinary()
	if err != nil {
		return nil, err
	}
	d := binary.NativeEndian.AppendUint32(nil, uint32(-int32(errno)))
	return []netlink.Message{{Header: netlink.Header{Type: netlink.Error, Sequence: in[0].Header.Sequence, PID: in[0].Header.PID}, Data: append(d, hdr[:16]...)}}, nil
}

func TestClient(t *testing.T) {
	var reqs []netlink.Message
	devs := []Device{{0, "mlx5_0"}, {3, "mlx5_3"}, {5, "mlx5_5"}}
	c := &Client{noDeadline: true, dial: func() (*netlink.Conn, error) { return fakeKernel(t, devs, healthy(), &reqs), nil }}
	l, err := c.QueuePairs(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Devices) != 3 || l.Devices[1] != devs[1] || len(l.QPs) != 4 {
		t.Fatalf("%+v", l)
	}
	n := map[string]int{}
	for _, q := range l.QPs {
		if q.HasPID && q.PID == 4242 {
			n[q.Device]++
		}
	}
	if n["mlx5_0"] != 2 || n["mlx5_3"] != 1 || len(n) != 2 {
		t.Errorf("QPs of 4242 by device: %v", n)
	}
	// One device dump, then one QP dump per device (RDMA_NL_GET_TYPE(5, 10)).
	if len(reqs) != 4 || reqs[0].Header.Type != 0x1401 || reqs[1].Header.Type != 0x140a || reqs[3].Header.Type != 0x140a {
		t.Errorf("requests %+v", reqs)
	}
}

func TestClientErrors(t *testing.T) {
	for _, c := range []struct {
		name string
		fn   nltest.Func
		dial error
		want error
	}{
		{name: "no CAP_NET_ADMIN", fn: func(in []netlink.Message) ([]netlink.Message, error) { return errReply(syscall.EPERM, in) }, want: ErrNoPrivilege},
		{name: "no NLDEV", fn: func(in []netlink.Message) ([]netlink.Message, error) { return errReply(syscall.EOPNOTSUPP, in) }, want: ErrNotAvailable},
		{name: "no ib_core", dial: syscall.EPROTONOSUPPORT, want: ErrNotAvailable},
		{name: "no device", fn: func(in []netlink.Message) ([]netlink.Message, error) { return multipart(nil, in[0]) }, want: ErrNotAvailable},
	} {
		cl := &Client{noDeadline: true, dial: func() (*netlink.Conn, error) {
			if c.dial != nil {
				return nil, c.dial
			}
			return nltest.Dial(c.fn), nil
		}}
		if _, err := cl.QueuePairs(context.Background()); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
}

func FuzzDecodeQPs(f *testing.F) {
	for _, b := range healthy() {
		f.Add(b)
	}
	f.Add(qpAnswer(1, "x", nest(attrResQPEntry, nla(attrResPID))))
	f.Fuzz(func(t *testing.T, b []byte) {
		qps, dropped, err := DecodeQPs(b, nil, 4)
		if len(qps) > 4 || dropped < 0 || (err != nil && len(qps) != 0) {
			t.Fatalf("%d QPs, %d dropped, %v", len(qps), dropped, err)
		}
		DecodeDevice(b)
	})
}

// mlx5 fails QUERY_QP of a device in internal error (EIO from the dump):
// that device's queue pairs are lost, the others' kept, and the device is
// said failed; every device failing is the listing's error.
func TestClientOneDeviceFails(t *testing.T) {
	var reqs []netlink.Message
	devs := []Device{{0, "mlx5_0"}, {3, "mlx5_3"}, {5, "mlx5_5"}}
	inner := kernelFunc(t, devs, healthy(), &reqs)
	fail := map[uint32]bool{3: true}
	dial := func() (*netlink.Conn, error) {
		return nltest.Dial(func(in []netlink.Message) ([]netlink.Message, error) {
			if in[0].Header.Type == 5<<10+10 && fail[binary.NativeEndian.Uint32(in[0].Data[4:])] {
				return errReply(syscall.EIO, in)
			}
			return inner(in)
		}), nil
	}
	c := &Client{noDeadline: true, dial: dial}
	l, err := c.QueuePairs(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Failed) != 1 || l.Failed[0].Device != "mlx5_3" {
		t.Fatalf("failed %+v", l.Failed)
	}
	for _, q := range l.QPs {
		if q.Device == "mlx5_3" {
			t.Errorf("a queue pair of the failed device kept: %+v", q)
		}
	}
	if n := len(l.QPs); n != 3 {
		t.Errorf("%d QPs of the other devices, want 3: %+v", n, l.QPs)
	}
	fail[0], fail[5] = true, true
	if _, err := (&Client{noDeadline: true, dial: dial}).QueuePairs(context.Background()); err == nil {
		t.Error("every device failing is no error")
	}
}
