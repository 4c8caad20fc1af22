package portfwd

import (
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The sk_lookup program, as the kernel sees it. It runs for every TCP or
// UDP socket lookup of a packet arriving in the network namespace it is
// attached to (Linux 5.9), before the regular lookup: a TCP lookup whose
// destination is 127.0.0.1 (or ::1) gets the listener in slot keyV4 (keyV6)
// of the socket map, whatever the port; every other lookup goes on as if
// the program were not there. Written out in BPF instructions, so that no
// compiler and no eBPF library is needed:
//
//	r6 = r1                                 ; struct bpf_sk_lookup *ctx
//	if ctx->protocol != IPPROTO_TCP goto pass
//	if ctx->family == AF_INET goto v4
//	if ctx->family != AF_INET6 goto pass
//	if ctx->local_ip6 != ::1 goto pass      ; four 32-bit words
//	key = keyV6; goto lookup
//	v4: if ctx->local_ip4 != 127.0.0.1 goto pass
//	key = keyV4
//	lookup: sk = bpf_map_lookup_elem(&listeners, &key)
//	if sk == NULL goto pass                 ; no listener in that slot
//	bpf_sk_assign(ctx, sk, 0)
//	bpf_sk_release(sk)
//	pass: return SK_PASS
//
// A failed bpf_sk_assign is not an error either: the lookup goes on as
// usual and finds no listener (a refused connection).

// Offsets in struct bpf_sk_lookup (include/uapi/linux/bpf.h).
const (
	offFamily   = 8
	offProtocol = 12
	offLocalIP4 = 40
	offLocalIP6 = 44
)

// The slots of the socket map.
const (
	keyV4 = 0
	keyV6 = 1
)

// Helper function numbers (enum bpf_func_id) and the program's verdict.
const (
	helperMapLookupElem = 1
	helperSkRelease     = 86
	helperSkAssign      = 124
	skPass              = 1
)

// Registers.
const (
	r0, r1, r2, r3, r6, r7, r10 = 0, 1, 2, 3, 6, 7, 10
)

// insn is one BPF instruction, or a label (name set, op 0) that names the
// next one. jump names the label a jump goes to.
type insn struct {
	op       uint8
	dst, src uint8
	off      int16
	imm      int32
	jump     string
	name     string
}

func label(name string) insn { return insn{name: name} }
func movReg(dst, src uint8) insn {
	return insn{op: unix.BPF_ALU64 | unix.BPF_MOV | unix.BPF_X, dst: dst, src: src}
}
func movImm(dst uint8, imm int32) insn {
	return insn{op: unix.BPF_ALU64 | unix.BPF_MOV | unix.BPF_K, dst: dst, imm: imm}
}
func addImm(dst uint8, imm int32) insn {
	return insn{op: unix.BPF_ALU64 | unix.BPF_ADD | unix.BPF_K, dst: dst, imm: imm}
}
func loadW(dst, src uint8, off int16) insn {
	return insn{op: unix.BPF_LDX | unix.BPF_MEM | unix.BPF_W, dst: dst, src: src, off: off}
}
func storeW(dst uint8, off int16, src uint8) insn {
	return insn{op: unix.BPF_STX | unix.BPF_MEM | unix.BPF_W, dst: dst, src: src, off: off}
}
func call(helper int32) insn { return insn{op: unix.BPF_JMP | unix.BPF_CALL, imm: helper} }
func exit() insn             { return insn{op: unix.BPF_JMP | unix.BPF_EXIT} }
func goTo(to string) insn    { return insn{op: unix.BPF_JMP | unix.BPF_JA, jump: to} }

// jumpIf compares the register's low 32 bits with imm (BPF_JMP32, Linux 5.1).
func jumpIf(cond uint8, dst uint8, imm int32, to string) insn {
	return insn{op: unix.BPF_JMP32 | cond | unix.BPF_K, dst: dst, imm: imm, jump: to}
}

// jumpIfNil compares the whole register (a pointer) with 0.
func jumpIfNil(dst uint8, to string) insn {
	return insn{op: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, dst: dst, jump: to}
}

// loadMap is the two-slot instruction that loads the map with descriptor fd.
func loadMap(dst uint8, fd int) []insn {
	return []insn{
		{op: unix.BPF_LD | unix.BPF_DW | unix.BPF_IMM, dst: dst, src: unix.BPF_PSEUDO_MAP_FD, imm: int32(fd)},
		{},
	}
}

// word is a 32-bit field of the context holding these bytes (network
// order), as a load reads it on this machine.
func word(b ...byte) int32 { return int32(binary.NativeEndian.Uint32(b)) }

func program(listeners int) []insn {
	p := []insn{
		movReg(r6, r1),
		loadW(r2, r6, offProtocol),
		jumpIf(unix.BPF_JNE, r2, unix.IPPROTO_TCP, "pass"),
		loadW(r2, r6, offFamily),
		jumpIf(unix.BPF_JEQ, r2, unix.AF_INET, "v4"),
		jumpIf(unix.BPF_JNE, r2, unix.AF_INET6, "pass"),
		loadW(r2, r6, offLocalIP6), jumpIf(unix.BPF_JNE, r2, 0, "pass"),
		loadW(r2, r6, offLocalIP6+4), jumpIf(unix.BPF_JNE, r2, 0, "pass"),
		loadW(r2, r6, offLocalIP6+8), jumpIf(unix.BPF_JNE, r2, 0, "pass"),
		loadW(r2, r6, offLocalIP6+12), jumpIf(unix.BPF_JNE, r2, word(0, 0, 0, 1), "pass"),
		movImm(r2, keyV6),
		goTo("lookup"),
		label("v4"),
		loadW(r2, r6, offLocalIP4), jumpIf(unix.BPF_JNE, r2, word(127, 0, 0, 1), "pass"),
		movImm(r2, keyV4),
		label("lookup"),
		storeW(r10, -4, r2),
	}
	p = append(p, loadMap(r1, listeners)...)
	return append(p,
		movReg(r2, r10),
		addImm(r2, -4),
		call(helperMapLookupElem),
		jumpIfNil(r0, "pass"),
		movReg(r7, r0),
		movReg(r1, r6),
		movReg(r2, r7),
		movImm(r3, 0),
		call(helperSkAssign),
		movReg(r1, r7),
		call(helperSkRelease),
		label("pass"),
		movImm(r0, skPass),
		exit(),
	)
}

// assemble resolves the labels and encodes the instructions.
func assemble(p []insn) ([]byte, error) {
	at := map[string]int{}
	var code []insn
	for _, in := range p {
		if in.name != "" {
			at[in.name] = len(code)
			continue
		}
		code = append(code, in)
	}
	le := binary.NativeEndian.Uint16([]byte{1, 0}) == 1
	out := make([]byte, 0, 8*len(code))
	for i, in := range code {
		if in.jump != "" {
			to, ok := at[in.jump]
			if !ok {
				return nil, fmt.Errorf("no label %q", in.jump)
			}
			in.off = int16(to - i - 1)
		}
		regs := in.dst | in.src<<4
		if !le {
			regs = in.dst<<4 | in.src
		}
		out = append(out, in.op, regs)
		out = binary.NativeEndian.AppendUint16(out, uint16(in.off))
		out = binary.NativeEndian.AppendUint32(out, uint32(in.imm))
	}
	return out, nil
}

// The bpf(2) attributes used here. Pointers are unsafe.Pointer, which the
// kernel reads as 64 bits: steer refuses to run where they are not.
type mapCreateAttr struct {
	mapType, keySize, valueSize, maxEntries, mapFlags, innerMapFd, numaNode uint32
	name                                                                    [unix.BPF_OBJ_NAME_LEN]byte
}

type mapUpdateAttr struct {
	mapFd      uint32
	_          uint32
	key, value unsafe.Pointer
	flags      uint64
}

type progLoadAttr struct {
	progType, insnCnt     uint32
	insns, license        unsafe.Pointer
	logLevel, logSize     uint32
	logBuf                unsafe.Pointer
	kernVersion, flags    uint32
	name                  [unix.BPF_OBJ_NAME_LEN]byte
	ifindex, expectedType uint32
}

type linkCreateAttr struct {
	progFd, targetFd, attachType, flags uint32
}

func bpf(cmd uintptr, attr unsafe.Pointer, size uintptr) (int, error) {
	fd, _, errno := unix.Syscall(unix.SYS_BPF, cmd, uintptr(attr), size)
	runtime.KeepAlive(attr)
	if errno != 0 {
		return -1, errno
	}
	return int(fd), nil
}

// objName is a name bpftool shows for the map and the program.
func objName(s string) (n [unix.BPF_OBJ_NAME_LEN]byte) {
	copy(n[:len(n)-1], s)
	return n
}

// steer attaches the sk_lookup program to the network namespace netns,
// steering to the listeners v4 and v6 (a descriptor, or -1 for none). It
// returns the link's descriptor: the program stays attached until that is
// closed (or the process ends), and never outlives the namespace.
func steer(netns, v4, v6 int) (link int, retErr error) {
	if unsafe.Sizeof(unsafe.Pointer(nil)) != 8 {
		return -1, errors.New("catching loopback connections needs 64-bit pointers in bpf(2) (a 64-bit build)")
	}
	mattr := mapCreateAttr{mapType: unix.BPF_MAP_TYPE_SOCKMAP, keySize: 4, valueSize: 8, maxEntries: 2, name: objName("vmpod_portfwd")}
	m, err := bpf(unix.BPF_MAP_CREATE, unsafe.Pointer(&mattr), unsafe.Sizeof(mattr))
	if err != nil {
		return -1, fmt.Errorf("BPF socket map: %w%s", err, hint(err))
	}
	defer unix.Close(m) // the program holds the map, the link the program
	for _, slot := range []struct {
		key uint32
		fd  int
	}{{keyV4, v4}, {keyV6, v6}} {
		if slot.fd < 0 {
			continue
		}
		key, value := slot.key, uint64(slot.fd)
		uattr := mapUpdateAttr{mapFd: uint32(m), key: unsafe.Pointer(&key), value: unsafe.Pointer(&value)}
		if _, err := bpf(unix.BPF_MAP_UPDATE_ELEM, unsafe.Pointer(&uattr), unsafe.Sizeof(uattr)); err != nil {
			return -1, fmt.Errorf("put the listener (slot %d) in the BPF socket map: %w", key, err)
		}
	}
	code, err := assemble(program(m))
	if err != nil {
		return -1, err
	}
	prog, err := load(code, 0, nil)
	if err != nil {
		// Again with the verifier's log, for the error.
		buf := make([]byte, 64<<10)
		if _, err2 := load(code, 1, buf); err2 != nil {
			if n := indexNUL(buf); n > 0 {
				err = fmt.Errorf("%w: %s", err, buf[:n])
			}
		}
		return -1, fmt.Errorf("load the BPF sk_lookup program: %w%s", err, hint(err))
	}
	defer unix.Close(prog)
	lattr := linkCreateAttr{progFd: uint32(prog), targetFd: uint32(netns), attachType: unix.BPF_SK_LOOKUP}
	link, err = bpf(unix.BPF_LINK_CREATE, unsafe.Pointer(&lattr), unsafe.Sizeof(lattr))
	if err != nil {
		return -1, fmt.Errorf("attach the BPF sk_lookup program to the pod network namespace: %w%s", err, hint(err))
	}
	return link, nil
}

// license: the program calls no GPL-only helper, so any string will do.
var license = []byte("Apache-2.0\x00")

func load(code []byte, level uint32, log []byte) (int, error) {
	attr := progLoadAttr{
		progType:     unix.BPF_PROG_TYPE_SK_LOOKUP,
		insnCnt:      uint32(len(code) / 8),
		insns:        unsafe.Pointer(&code[0]),
		license:      unsafe.Pointer(&license[0]),
		name:         objName("vmpod_portfwd"),
		expectedType: unix.BPF_SK_LOOKUP,
	}
	if len(log) > 0 {
		attr.logLevel, attr.logSize, attr.logBuf = level, uint32(len(log)), unsafe.Pointer(&log[0])
	}
	fd, err := bpf(unix.BPF_PROG_LOAD, unsafe.Pointer(&attr), unsafe.Sizeof(attr))
	runtime.KeepAlive(code)
	runtime.KeepAlive(log)
	return fd, err
}

func indexNUL(b []byte) int {
	for i, c := range b {
		if c == 0 {
			return i
		}
	}
	return len(b)
}

// hint says what the kernel most likely lacks.
func hint(err error) string {
	switch {
	case errors.Is(err, unix.EPERM):
		return " (needs CAP_BPF and CAP_NET_ADMIN, or CAP_SYS_ADMIN)"
	case errors.Is(err, unix.EINVAL), errors.Is(err, unix.ENOSYS), errors.Is(err, unix.EOPNOTSUPP):
		return " (needs a kernel with BPF sk_lookup, Linux 5.9 or later, CONFIG_BPF_SYSCALL)"
	}
	return ""
}
