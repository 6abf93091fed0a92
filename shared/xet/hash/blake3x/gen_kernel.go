//go:build ignore

// gen_kernel writes kernel_amd64.s: the AVX-512 kernel that runs the BLAKE3 compression
// function for 16 independent inputs at once, one input per 32-bit lane of the zmm registers
// (kernel16), and the same code on ymm registers for 8 inputs (kernel8).
// Run it with `go generate` in this directory (see blake3x.go).
//
// Register plan per 64-byte block:
//   - Z0..Z7 hold the chaining values of the 16 lanes (word i of every lane in Zi) and live
//     across blocks.
//   - The 16 message rows (one zmm per lane) are loaded and transposed into 16 "word" registers
//     (word w of every lane in one zmm) with three shuffle stages; registers are handed out by
//     a small allocator from Z8..Z31, so no register moves are needed.
//   - The 8 registers left free after the transpose hold state words v8..v15.
//   - The message permutation between rounds is resolved here, at generation time: each
//     round names the registers of its words directly.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"log"
	"os"
)

var buf bytes.Buffer

func emit(format string, args ...any) { fmt.Fprintf(&buf, "\t"+format+"\n", args...) }

// alloc hands out zmm registers from a free list.
type alloc struct{ free []int }

func (a *alloc) get() int {
	if len(a.free) == 0 {
		log.Fatal("out of registers")
	}
	r := a.free[0]
	a.free = a.free[1:]
	return r
}

func (a *alloc) put(r int) { a.free = append(a.free, r) }

// width is the number of lanes of the kernel being written: 16 (zmm registers) or 8 (ymm).
var width = 16

// z names vector register r at the current width.
func z(r int) string {
	if width == 8 {
		return fmt.Sprintf("Y%d", r)
	}
	return fmt.Sprintf("Z%d", r)
}

// pairOp applies two two-input shuffles to (x, y), producing (lo, hi) in fresh registers and
// freeing x and y. Go operand order: src2, src1, dst.
func pairOp(a *alloc, lo, hi string, x, y int) (int, int) {
	rl, rh := a.get(), a.get()
	emit("%s %s, %s, %s", lo, z(y), z(x), z(rl))
	emit("%s %s, %s, %s", hi, z(y), z(x), z(rh))
	a.put(x)
	a.put(y)
	return rl, rh
}

func shufPair(a *alloc, x, y int) (int, int) {
	rl, rh := a.get(), a.get()
	// 0x88 takes 128-bit blocks (0,2) of each source, 0xDD blocks (1,3).
	emit("VSHUFI32X4 $0x88, %s, %s, %s", z(y), z(x), z(rl))
	emit("VSHUFI32X4 $0xDD, %s, %s, %s", z(y), z(x), z(rh))
	a.put(x)
	a.put(y)
	return rl, rh
}

// transpose loads the 16 lane rows of the current block and returns, for each message word w,
// the register that holds word w of all 16 lanes.
func transpose(a *alloc) [16]int {
	if width == 8 {
		return transpose8(a)
	}
	var row [16]int
	for i := 0; i < 16; i++ {
		row[i] = a.get()
		emit("MOVQ %d(R8), R11", 8*i)
		emit("VMOVDQU32 (R11)(SI*1), %s", z(row[i]))
	}
	// Stage 1: interleave dwords of lanes (2p, 2p+1).
	// lo[p]: per 128-bit block s: words (4s, 4s+1) of lanes 2p,2p+1; hi[p]: words (4s+2, 4s+3).
	var d1lo, d1hi [8]int
	for p := 0; p < 8; p++ {
		d1lo[p], d1hi[p] = pairOp(a, "VPUNPCKLDQ", "VPUNPCKHDQ", row[2*p], row[2*p+1])
	}
	// Stage 2: interleave qwords of lane pairs (2q, 2q+1) -> groups of 4 lanes.
	// x[g][k]: block s holds word k+4s of lanes 4g..4g+3.
	var x [4][4]int
	for g := 0; g < 4; g++ {
		x[g][0], x[g][1] = pairOp(a, "VPUNPCKLQDQ", "VPUNPCKHQDQ", d1lo[2*g], d1lo[2*g+1])
		x[g][2], x[g][3] = pairOp(a, "VPUNPCKLQDQ", "VPUNPCKHQDQ", d1hi[2*g], d1hi[2*g+1])
	}
	// Stages 3 and 4: a 4x4 transpose of 128-bit blocks for each k.
	var word [16]int
	for k := 0; k < 4; k++ {
		A, B := shufPair(a, x[0][k], x[1][k]) // A=[x0.b0 x0.b2 x1.b0 x1.b2], B=[x0.b1 x0.b3 x1.b1 x1.b3]
		C, D := shufPair(a, x[2][k], x[3][k])
		word[k], word[k+8] = shufPair(a, A, C)
		word[k+4], word[k+12] = shufPair(a, B, D)
	}
	return word
}

// transpose8 is transpose for the 8-lane kernel: each lane's block is loaded as two ymm halves
// (words 0..7, 8..15), and each half of the 8 lanes is an 8x8 transpose in three stages.
func transpose8(a *alloc) [16]int {
	var word [16]int
	var row [2][8]int
	for l := 0; l < 8; l++ {
		emit("MOVQ %d(R8), R11", 8*l)
		for h := 0; h < 2; h++ {
			row[h][l] = a.get()
			emit("VMOVDQU32 %d(R11)(SI*1), %s", 32*h, z(row[h][l]))
		}
	}
	for h := 0; h < 2; h++ {
		// Stage 1: d1lo[p], per 128-bit block s: words 4s, 4s+1 of lanes 2p, 2p+1; d1hi[p]:
		// words 4s+2, 4s+3.
		var d1lo, d1hi [4]int
		for p := 0; p < 4; p++ {
			d1lo[p], d1hi[p] = pairOp(a, "VPUNPCKLDQ", "VPUNPCKHDQ", row[h][2*p], row[h][2*p+1])
		}
		// Stage 2: x[g][k], block s: word k+4s of lanes 4g..4g+3.
		var x [2][4]int
		for g := 0; g < 2; g++ {
			x[g][0], x[g][1] = pairOp(a, "VPUNPCKLQDQ", "VPUNPCKHQDQ", d1lo[2*g], d1lo[2*g+1])
			x[g][2], x[g][3] = pairOp(a, "VPUNPCKLQDQ", "VPUNPCKHQDQ", d1hi[2*g], d1hi[2*g+1])
		}
		// Stage 3: word k = the low blocks of x[0][k], x[1][k]; word k+4 the high blocks.
		for k := 0; k < 4; k++ {
			lo, hi := a.get(), a.get()
			emit("VSHUFI32X4 $0x00, %s, %s, %s", z(x[1][k]), z(x[0][k]), z(lo))
			emit("VSHUFI32X4 $0x03, %s, %s, %s", z(x[1][k]), z(x[0][k]), z(hi))
			a.put(x[0][k])
			a.put(x[1][k])
			word[8*h+k], word[8*h+k+4] = lo, hi
		}
	}
	return word
}

// g emits the four G functions of one half-round interleaved, step by step.
func g(v *[16]int, quads [4][4]int, mx, my [4]int) {
	for half := 0; half < 2; half++ {
		m := mx
		if half == 1 {
			m = my
		}
		r1, r2 := 16, 12
		if half == 1 {
			r1, r2 = 8, 7
		}
		// a += m first: m is ready and a was not touched since the last step, so this
		// add waits for nothing; only a += b waits for the b the previous step just rotated.
		for i, q := range quads { // a += m
			emit("VPADDD %s, %s, %s", z(m[i]), z(v[q[0]]), z(v[q[0]]))
		}
		for _, q := range quads { // a += b
			emit("VPADDD %s, %s, %s", z(v[q[1]]), z(v[q[0]]), z(v[q[0]]))
		}
		for _, q := range quads { // d ^= a
			emit("VPXORD %s, %s, %s", z(v[q[0]]), z(v[q[3]]), z(v[q[3]]))
		}
		for _, q := range quads { // d >>>= r1
			emit("VPRORD $%d, %s, %s", r1, z(v[q[3]]), z(v[q[3]]))
		}
		for _, q := range quads { // c += d
			emit("VPADDD %s, %s, %s", z(v[q[3]]), z(v[q[2]]), z(v[q[2]]))
		}
		for _, q := range quads { // b ^= c
			emit("VPXORD %s, %s, %s", z(v[q[2]]), z(v[q[1]]), z(v[q[1]]))
		}
		for _, q := range quads { // b >>>= r2
			emit("VPRORD $%d, %s, %s", r2, z(v[q[1]]), z(v[q[1]]))
		}
	}
}

var perm = [16]int{2, 6, 3, 10, 7, 0, 4, 13, 1, 11, 12, 5, 9, 14, 15, 8}

var iv = [4]uint32{0x6A09E667, 0xBB67AE85, 0x3C6EF372, 0xA54FF53A}

const blockLen = 64

func main() {
	out := flag.String("out", "kernel_amd64.s", "output file")
	goOut := flag.String("goout", "compress_gen.go", "output file of the portable compression function")
	flag.Parse()
	genGo(*goOut)

	fmt.Fprintf(&buf, "// Code generated by gen_kernel.go; DO NOT EDIT.\n\n")
	fmt.Fprintf(&buf, "//go:build amd64 && !purego\n\n")
	fmt.Fprintf(&buf, "#include \"textflag.h\"\n\n")
	// consts: the IV words v8..v11 start from, then the block length.
	for i, w := range append(iv[:], blockLen) {
		fmt.Fprintf(&buf, "DATA consts<>+%d(SB)/4, $0x%08X\n", 4*i, w)
	}
	fmt.Fprintf(&buf, "GLOBL consts<>(SB), RODATA|NOPTR, $20\n\n")
	width = 16
	genKernel()
	width = 8
	genKernel()
	if err := os.WriteFile(*out, buf.Bytes(), 0o644); err != nil {
		log.Fatal(err)
	}
}

// genKernel writes kernel16 or kernel8 (by width): the same code on zmm or ymm registers.
// The 8-lane one serves batches of at most 8 inputs (the last chunks of a message, the upper
// tree levels) at about two thirds of the cost: with no 512-bit uops in flight the core runs
// vector ALU uops on three ports instead of two.
func genKernel() {
	fmt.Fprintf(&buf, "\n// func kernel%d(lanes *[16]unsafe.Pointer, blocks int, key *[8]uint32, ctr *[32]uint32, flags, start, end, tailMask uint32, tailLast int, tailLen, tailFlags uint32, out *[128]uint32)\n", width)
	fmt.Fprintf(&buf, "TEXT ·kernel%d(SB), NOSPLIT, $0-72\n", width)
	emit("MOVQ lanes+0(FP), R8")
	emit("XORQ SI, SI") // offset of the current block in every lane's input
	emit("MOVQ blocks+8(FP), DX")
	emit("MOVQ key+16(FP), R9")
	emit("MOVQ ctr+24(FP), R10")
	emit("MOVL flags+32(FP), BX")
	emit("MOVL start+36(FP), CX")
	emit("ORL BX, CX") // flags of the first block
	emit("MOVL end+40(FP), R12")
	emit("MOVL tailMask+44(FP), AX")
	emit("KMOVW AX, K3") // the lane whose input ends early, if any
	// R13: the value of DX (blocks left, counting this one) at the tail lane's last block.
	emit("MOVQ DX, R13")
	emit("SUBQ tailLast+48(FP), R13")
	emit("MOVQ out+64(FP), DI")
	for i := 0; i < 8; i++ {
		emit("VPBROADCASTD %d(R9), %s", 4*i, z(i))
	}
	fmt.Fprintf(&buf, "loop:\n")
	a := &alloc{}
	for r := 8; r < 32; r++ {
		a.free = append(a.free, r)
	}
	word := transpose(a)
	var v [16]int
	for i := 0; i < 8; i++ {
		v[i] = i
	}
	for i := 8; i < 16; i++ {
		v[i] = a.get()
	}
	// Constants come from memory: a broadcast load needs no vector ALU port (one from a
	// general register takes port 5, which the transpose keeps busy).
	for i := 0; i < 4; i++ {
		emit("VPBROADCASTD consts<>+%d(SB), %s", 4*i, z(v[8+i]))
	}
	emit("VMOVDQU32 (R10), %s", z(v[12]))
	emit("VMOVDQU32 64(R10), %s", z(v[13]))
	emit("VPBROADCASTD consts<>+16(SB), %s", z(v[14]))
	emit("MOVL CX, AX")
	emit("CMPQ DX, $1")
	emit("JNE notlast")
	emit("ORL R12, AX")
	fmt.Fprintf(&buf, "notlast:\n")
	emit("VPBROADCASTD AX, %s", z(v[15]))
	emit("MOVL BX, CX")
	// The tail lane's last block: its own length and flags.
	emit("CMPQ DX, R13")
	emit("JNE notaillen")
	emit("MOVL tailLen+56(FP), AX")
	emit("VPBROADCASTD AX, K3, %s", z(v[14]))
	emit("MOVL tailFlags+60(FP), AX")
	emit("VPBROADCASTD AX, K3, %s", z(v[15]))
	fmt.Fprintf(&buf, "notaillen:\n")

	sched := [16]int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}
	cols := [4][4]int{{0, 4, 8, 12}, {1, 5, 9, 13}, {2, 6, 10, 14}, {3, 7, 11, 15}}
	diags := [4][4]int{{0, 5, 10, 15}, {1, 6, 11, 12}, {2, 7, 8, 13}, {3, 4, 9, 14}}
	for round := 0; round < 7; round++ {
		var mx, my [4]int
		for i := 0; i < 4; i++ {
			mx[i], my[i] = word[sched[2*i]], word[sched[2*i+1]]
		}
		g(&v, cols, mx, my)
		for i := 0; i < 4; i++ {
			mx[i], my[i] = word[sched[8+2*i]], word[sched[8+2*i+1]]
		}
		g(&v, diags, mx, my)
		var next [16]int
		for i := range next {
			next[i] = sched[perm[i]]
		}
		sched = next
	}
	for i := 0; i < 8; i++ {
		emit("VPXORD %s, %s, %s", z(v[8+i]), z(i), z(i))
	}
	// After the tail lane's last block, park every lane's chaining value in out (word-major);
	// the tail lane's is merged back below.
	emit("CMPQ DX, R13")
	emit("JNE notailout")
	for i := 0; i < 8; i++ {
		emit("VMOVDQU32 %s, %d(DI)", z(i), 4*width*i)
	}
	fmt.Fprintf(&buf, "notailout:\n")
	emit("ADDQ $64, SI")
	emit("DECQ DX")
	emit("JNZ loop")
	// The tail lane (mask K3, none when 0) takes its parked chaining value back.
	for i := 0; i < 8; i++ {
		emit("VMOVDQU32 %d(DI), K3, %s", 4*width*i, z(i))
	}
	if width == 8 {
		untransposeOut8()
	} else {
		untransposeOut()
	}
	emit("VZEROUPPER")
	emit("RET")
}

// untransposeOut8 is untransposeOut for the 8-lane kernel: an 8x8 transpose of Y0..Y7 in three
// stages, one ymm (8 words) per lane.
func untransposeOut8() {
	a := &alloc{}
	for r := 8; r < 32; r++ {
		a.free = append(a.free, r)
	}
	A, B := untransposeWords(a)
	// Stage 3: lane 4s+k = [A[k].s B[k].s].
	for k := 0; k < 4; k++ {
		for s, imm := range []string{"$0x00", "$0x03"} {
			r := a.get()
			emit("VSHUFI32X4 %s, %s, %s, %s", imm, z(B[k]), z(A[k]), z(r))
			emit("VMOVDQU32 %s, %d(DI)", z(r), 32*(4*s+k))
			a.put(r)
		}
	}
}

// untransposeWords runs the first two stages both output transposes share, on the chaining
// values in registers 0..7 (word w of every lane in register w): per 128-bit block s, A[k]
// holds words 0..3 of lane 4s+k and B[k] words 4..7.
func untransposeWords(a *alloc) (A, B [4]int) {
	// Stage 1: lo[p], per 128-bit block s: words 2p, 2p+1 of lanes 4s, 4s+1; hi[p]: of lanes
	// 4s+2, 4s+3.
	var lo, hi [4]int
	for p := 0; p < 4; p++ {
		lo[p], hi[p] = pairOp(a, "VPUNPCKLDQ", "VPUNPCKHDQ", 2*p, 2*p+1)
	}
	// Stage 2: A[k], block s: words 0..3 of lane 4s+k; B[k]: words 4..7.
	A[0], A[1] = pairOp(a, "VPUNPCKLQDQ", "VPUNPCKHQDQ", lo[0], lo[1])
	A[2], A[3] = pairOp(a, "VPUNPCKLQDQ", "VPUNPCKHQDQ", hi[0], hi[1])
	B[0], B[1] = pairOp(a, "VPUNPCKLQDQ", "VPUNPCKHQDQ", lo[2], lo[3])
	B[2], B[3] = pairOp(a, "VPUNPCKLQDQ", "VPUNPCKHQDQ", hi[2], hi[3])
	return A, B
}

// untransposeOut stores the chaining values in Z0..Z7 (word w of every lane in Zw) to out
// lane by lane (8 words of lane l at out[8*l:]), so that the caller copies them in one piece:
// an 8x16 transpose in four shuffle stages, 32 shuffles for 16 lanes, where the Go code
// needed 128 scalar loads and stores.
func untransposeOut() {
	a := &alloc{}
	for r := 8; r < 32; r++ {
		a.free = append(a.free, r)
	}
	A, B := untransposeWords(a)
	// Stage 3: P[k][0] = [A[k].0 A[k].1 B[k].0 B[k].1], P[k][1] = the same of blocks 2, 3.
	var P [4][2]int
	for k := 0; k < 4; k++ {
		P[k][0], P[k][1] = a.get(), a.get()
		emit("VSHUFI32X4 $0x44, %s, %s, %s", z(B[k]), z(A[k]), z(P[k][0]))
		emit("VSHUFI32X4 $0xEE, %s, %s, %s", z(B[k]), z(A[k]), z(P[k][1]))
		a.put(A[k])
		a.put(B[k])
	}
	// Stage 4: lanes 4s+k, 4s+k+1 (k even) = [A[k].s B[k].s A[k+1].s B[k+1].s], 32 bytes a lane.
	for h := 0; h < 2; h++ {
		for k := 0; k < 4; k += 2 {
			for i, imm := range []string{"$0x88", "$0xDD"} {
				s := 2*h + i
				r := a.get()
				emit("VSHUFI32X4 %s, %s, %s, %s", imm, z(P[k+1][h]), z(P[k][h]), z(r))
				emit("VMOVDQU32 %s, %d(DI)", z(r), 32*(4*s+k))
				a.put(r)
			}
		}
	}
}

// genGo writes the portable compression function with the rounds unrolled and the message
// schedule resolved, so that the state and message words live in local variables.
func genGo(path string) {
	var b bytes.Buffer
	p := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	p("// Code generated by gen_kernel.go; DO NOT EDIT.\n")
	p("package blake3x\n")
	p("// compress is the BLAKE3 compression function: 7 rounds of G over the 4x4 state, returning")
	p("// the 16 output words (the first 8 are the next chaining value).")
	p("func compress(cv *[8]uint32, m *[16]uint32, counter uint64, blen, flags uint32) [16]uint32 {")
	p("\tv0, v1, v2, v3, v4, v5, v6, v7 := cv[0], cv[1], cv[2], cv[3], cv[4], cv[5], cv[6], cv[7]")
	p("\tv8, v9, v10, v11 := uint32(0x%08X), uint32(0x%08X), uint32(0x%08X), uint32(0x%08X)", iv[0], iv[1], iv[2], iv[3])
	p("\tv12, v13, v14, v15 := uint32(counter), uint32(counter>>32), blen, flags")
	p("\tm0, m1, m2, m3, m4, m5, m6, m7 := m[0], m[1], m[2], m[3], m[4], m[5], m[6], m[7]")
	p("\tm8, m9, m10, m11, m12, m13, m14, m15 := m[8], m[9], m[10], m[11], m[12], m[13], m[14], m[15]")
	sched := [16]int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}
	quads := [8][4]int{{0, 4, 8, 12}, {1, 5, 9, 13}, {2, 6, 10, 14}, {3, 7, 11, 15},
		{0, 5, 10, 15}, {1, 6, 11, 12}, {2, 7, 8, 13}, {3, 4, 9, 14}}
	for round := 0; round < 7; round++ {
		p("\t// round %d", round)
		for i, q := range quads {
			p("\tv%d, v%d, v%d, v%d = g(v%d, v%d, v%d, v%d, m%d, m%d)", q[0], q[1], q[2], q[3], q[0], q[1], q[2], q[3], sched[2*i], sched[2*i+1])
		}
		var next [16]int
		for i := range next {
			next[i] = sched[perm[i]]
		}
		sched = next
	}
	p("\treturn [16]uint32{")
	p("\t\tv0 ^ v8, v1 ^ v9, v2 ^ v10, v3 ^ v11, v4 ^ v12, v5 ^ v13, v6 ^ v14, v7 ^ v15,")
	p("\t\tv8 ^ cv[0], v9 ^ cv[1], v10 ^ cv[2], v11 ^ cv[3], v12 ^ cv[4], v13 ^ cv[5], v14 ^ cv[6], v15 ^ cv[7],")
	p("\t}")
	p("}\n")
	p("// g is the quarter-round of one column or diagonal.")
	p("func g(a, b, c, d, mx, my uint32) (uint32, uint32, uint32, uint32) {")
	p("\ta += b + mx")
	p("\td = bits.RotateLeft32(d^a, -16)")
	p("\tc += d")
	p("\tb = bits.RotateLeft32(b^c, -12)")
	p("\ta += b + my")
	p("\td = bits.RotateLeft32(d^a, -8)")
	p("\tc += d")
	p("\tb = bits.RotateLeft32(b^c, -7)")
	p("\treturn a, b, c, d")
	p("}")
	src := bytes.Replace(b.Bytes(), []byte("package blake3x\n"), []byte("package blake3x\n\nimport \"math/bits\"\n"), 1)
	if err := os.WriteFile(path, src, 0o644); err != nil {
		log.Fatal(err)
	}
}
