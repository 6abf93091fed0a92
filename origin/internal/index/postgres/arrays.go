package postgres

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"

	"github.com/jackc/pgx/v5"
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
