package postgres

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/jackc/pgx/v5/pgtype"
)

// Array parameters without pgx's per-element work. pgx encodes a [][]byte or []string array
// parameter element by element through reflection (a boxed element, a nil check and a type
// check for each) into a buffer grown by appends; a registration batch passes hundreds of
// elements, and that encoding was 7 % of the origin's CPU samples while registering, with
// allocations the garbage collector paid for again (perf/BENCHMARKS.md, 2026-12-02 "Shard
// registration: typed array parameters, one busy registrar"). byteaArray and textArray are
// written in PostgreSQL's binary array format in one pass into a buffer grown once. The SQL
// and what the server receives are the same as with the plain slices.

// byteaArray is a bytea[] parameter; a nil element is NULL, a nil array is NULL.
type byteaArray [][]byte

// textArray is a text[] parameter; a nil array is NULL.
type textArray []string

// sizedArray is the first parameter of a statement whose parameters take size bytes encoded
// (paramsSize): its encoding grows pgx's parameter buffer once for all of them, where each
// array would otherwise grow it again (to twice its size, so ~2x the parameters allocated
// per statement, which pgx drops after every statement).
type sizedArray struct {
	a    byteaArray
	size int
}

// paramsSize is the binary size of the array parameters among args (other types count
// nothing): what pgx's parameter buffer and its Bind message will hold.
func paramsSize(args []any) int {
	n := 0
	for _, a := range args {
		switch a := a.(type) {
		case byteaArray:
			n += encodedSize(a)
		case textArray:
			n += encodedSize(a)
		case sizedArray:
			n += encodedSize(a.a)
		}
	}
	return n
}

// encodedSize is the binary size of a one-dimensional array of a's elements: a 20-byte header,
// then a length word and the bytes of each.
func encodedSize[E []byte | string](a []E) int {
	n := 20
	for _, e := range a {
		n += 4 + len(e)
	}
	return n
}

// reserveSend grows the write buffer of a connection's frontend to hold n more bytes, for the
// Bind message of a statement whose parameters take n bytes, about to be queued on it. pgx
// shrinks that buffer to 1 KB after every flush, and a Bind of hundreds of KB appended to it
// parameter by parameter grew it by a quarter at a time: ~5x its size allocated per batch
// (perf/BENCHMARKS.md, 2026-12-02 "Shard registration: the origin's allocations"). The
// message writes nothing; what pgx queues next is what goes out.
func reserveSend(f *pgproto3.Frontend, n int) {
	if f != nil && n > 0 {
		f.Send(reserveMsg(n))
	}
}

// reserveMsg is a frontend message of no bytes whose encoding grows the buffer by its value.
type reserveMsg int

// Frontend implements pgproto3.FrontendMessage.
func (reserveMsg) Frontend() {}

// Encode implements pgproto3.Message: dst unchanged, with room for r more bytes.
func (r reserveMsg) Encode(dst []byte) ([]byte, error) { return slices.Grow(dst, int(r)), nil }

// Decode implements pgproto3.Message; the message is never received.
func (reserveMsg) Decode([]byte) error { return fmt.Errorf("postgres: reserveMsg is not decoded") }

// arrayCodec is the codec of bytea[] and text[] on this package's connections: pgx's own,
// except that byteaArray and textArray values get a typed encode plan.
type arrayCodec struct {
	*pgtype.ArrayCodec
}

// PlanEncode implements pgtype.Codec.
func (c arrayCodec) PlanEncode(m *pgtype.Map, oid uint32, format int16, value any) pgtype.EncodePlan {
	if format == pgtype.BinaryFormatCode {
		switch value.(type) {
		case byteaArray:
			return encodeByteaArray{elem: c.ElementType.OID}
		case textArray:
			return encodeTextArray{elem: c.ElementType.OID}
		case sizedArray:
			return encodeSizedArray{encodeByteaArray{elem: c.ElementType.OID}}
		}
	}
	return c.ArrayCodec.PlanEncode(m, oid, format, value)
}

// registerArrayCodecs installs arrayCodec for bytea[] and text[] in a connection's type map
// (pgxpool's AfterConnect).
func registerArrayCodecs(_ context.Context, conn *pgx.Conn) error {
	m := conn.TypeMap()
	for _, oid := range []uint32{pgtype.ByteaArrayOID, pgtype.TextArrayOID} {
		t, ok := m.TypeForOID(oid)
		if !ok {
			return fmt.Errorf("postgres: no type for oid %d", oid)
		}
		ac, ok := t.Codec.(*pgtype.ArrayCodec)
		if !ok {
			return fmt.Errorf("postgres: codec of %s is %T, not an array codec", t.Name, t.Codec)
		}
		m.RegisterType(&pgtype.Type{Name: t.Name, OID: t.OID, Codec: arrayCodec{ac}})
	}
	return nil
}

// arrayHeader appends the binary array header (one dimension, lower bound 1; none when empty)
// after growing buf by size bytes at once, size being the elements' length words and bytes.
func arrayHeader(buf []byte, elem uint32, n int, nulls bool, size int) ([]byte, error) {
	if n > math.MaxInt32 || size > math.MaxInt32 {
		return nil, fmt.Errorf("postgres: array of %d elements, %d bytes: too large", n, size)
	}
	need := 20 + size
	if cap(buf)-len(buf) < need {
		nb := make([]byte, len(buf), max(2*cap(buf), len(buf)+need))
		copy(nb, buf)
		buf = nb
	}
	dims := uint32(1)
	if n == 0 {
		dims = 0
	}
	hasNull := uint32(0)
	if nulls {
		hasNull = 1
	}
	buf = binary.BigEndian.AppendUint32(buf, dims)
	buf = binary.BigEndian.AppendUint32(buf, hasNull)
	buf = binary.BigEndian.AppendUint32(buf, elem)
	if n > 0 {
		buf = binary.BigEndian.AppendUint32(buf, uint32(n))
		buf = binary.BigEndian.AppendUint32(buf, 1)
	}
	return buf, nil
}

type encodeByteaArray struct{ elem uint32 }

// Encode implements pgtype.EncodePlan.
func (p encodeByteaArray) Encode(value any, buf []byte) ([]byte, error) {
	a := value.(byteaArray)
	if a == nil {
		return nil, nil
	}
	size, nulls := 0, false
	for _, e := range a {
		if e == nil {
			nulls = true
		} else if len(e) > math.MaxInt32 {
			return nil, fmt.Errorf("postgres: bytea of %d bytes: too large", len(e))
		}
		size += 4 + len(e)
	}
	buf, err := arrayHeader(buf, p.elem, len(a), nulls, size)
	if err != nil {
		return nil, err
	}
	for _, e := range a {
		if e == nil {
			buf = binary.BigEndian.AppendUint32(buf, math.MaxUint32) // -1: NULL
			continue
		}
		buf = binary.BigEndian.AppendUint32(buf, uint32(len(e)))
		buf = append(buf, e...)
	}
	return buf, nil
}

type encodeSizedArray struct{ encodeByteaArray }

// Encode implements pgtype.EncodePlan.
func (p encodeSizedArray) Encode(value any, buf []byte) ([]byte, error) {
	v := value.(sizedArray)
	return p.encodeByteaArray.Encode(v.a, slices.Grow(buf, v.size))
}

type encodeTextArray struct{ elem uint32 }

// Encode implements pgtype.EncodePlan. The strings go as they are, as pgx's text codec sends
// them in binary format (the server checks their encoding).
func (p encodeTextArray) Encode(value any, buf []byte) ([]byte, error) {
	a := value.(textArray)
	if a == nil {
		return nil, nil
	}
	size := 0
	for _, e := range a {
		if len(e) > math.MaxInt32 {
			return nil, fmt.Errorf("postgres: text of %d bytes: too large", len(e))
		}
		size += 4 + len(e)
	}
	buf, err := arrayHeader(buf, p.elem, len(a), false, size)
	if err != nil {
		return nil, err
	}
	for _, e := range a {
		buf = binary.BigEndian.AppendUint32(buf, uint32(len(e)))
		buf = append(buf, e...)
	}
	return buf, nil
}
