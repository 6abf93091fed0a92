package postgres

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/xetcdn/xetcdn/origin/internal/index"
	"github.com/xetcdn/xetcdn/origin/internal/index/indextest"
)

// TestArrayParams: the typed array parameters (arrays.go) reach the server as the same arrays
// as pgx's own encoding of the plain slices — NULL elements, empty elements, empty and NULL
// arrays, non-ASCII text included.
func TestArrayParams(t *testing.T) {
	db, err := Open(t.Context(), Options{DSN: FreshSchema(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	big := make([]byte, 70_000)
	for i := range big {
		big[i] = byte(i * 7)
	}
	for i, c := range [][][]byte{nil, {}, {nil}, {{}}, {[]byte("a\x00b"), nil, {}, big, {0xff}}} {
		var same, null bool
		err := db.pool.QueryRow(t.Context(), `SELECT $1::bytea[] IS NOT DISTINCT FROM $2::bytea[], $1::bytea[] IS NULL`,
			byteaArray(c), c).Scan(&same, &null)
		if err != nil {
			t.Fatalf("bytea case %d: %v", i, err)
		}
		if !same || null != (c == nil) {
			t.Errorf("bytea case %d: same as pgx's = %v, NULL = %v", i, same, null)
		}
	}
	for i, c := range [][]string{nil, {}, {""}, {"models/a/b", "datasets/ü/ß", `q"u\o,te{}`}} {
		var same, null bool
		err := db.pool.QueryRow(t.Context(), `SELECT $1::text[] IS NOT DISTINCT FROM $2::text[], $1::text[] IS NULL`,
			textArray(c), c).Scan(&same, &null)
		if err != nil {
			t.Fatalf("text case %d: %v", i, err)
		}
		if !same || null != (c == nil) {
			t.Errorf("text case %d: same as pgx's = %v, NULL = %v", i, same, null)
		}
	}
	// Invalid UTF-8 is refused by the server, as with pgx's own encoding.
	if _, err := db.pool.Exec(t.Context(), `SELECT $1::text[]`, textArray{"\xff"}); err == nil {
		t.Error("text array with invalid UTF-8 accepted")
	}
}

// TestRegisterArgsEncoding: encoding a registration batch's parameters on the origin's
// connections costs a few allocations for the whole batch, not some per array element (pgx's
// reflective path boxed each element).
func TestRegisterArgsEncoding(t *testing.T) {
	m, args := batchArgs(t, 301, 0)
	oids := []uint32{pgtype.ByteaArrayOID, pgtype.TextArrayOID, pgtype.ByteaArrayOID, pgtype.ByteaArrayOID,
		pgtype.ByteaArrayOID, pgtype.TextArrayOID, pgtype.ByteaArrayOID, pgtype.ByteaArrayOID,
		pgtype.ByteaArrayOID, pgtype.ByteaArrayOID, pgtype.ByteaArrayOID, pgtype.ByteaArrayOID}
	if len(args) != len(oids) {
		t.Fatalf("%d arguments, want %d", len(args), len(oids))
	}
	elems := 0
	for _, a := range args {
		switch a := a.(type) {
		case [][]byte:
			elems += len(a)
		case byteaArray:
			elems += len(a)
		case []string:
			elems += len(a)
		case textArray:
			elems += len(a)
		case sizedArray:
			elems += len(a.a)
		}
	}
	buf := make([]byte, 0, 1<<20) // as pgx reuses its own: growth is not what is measured
	encode := func() {
		b := buf[:0]
		for i, a := range args {
			var err error
			if b, err = m.Encode(oids[i], pgtype.BinaryFormatCode, a, b); err != nil {
				t.Fatal(err)
			}
		}
	}
	encode()
	if allocs := testing.AllocsPerRun(20, encode); allocs > float64(len(args)) {
		t.Errorf("encoding the %d parameters (%d elements) of a batch of %d: %.0f allocations, want at most %d",
			len(args), elems, batchSize, allocs, len(args))
	}
}

// TestRegisterArgsOneBuffer: pgx's parameter buffer, which it shrinks to 256 bytes before every
// statement, grows once for a whole registration batch (its first parameter reserves what all
// take, paramsSize), not once or twice per array; and paramsSize is what they take.
func TestRegisterArgsOneBuffer(t *testing.T) {
	m, args := batchArgs(t, 302, 2000) // an inline body, as a 4-file upload shard has
	var encoded int
	encode := func() {
		b := make([]byte, 0, 256) // what pgx starts each statement with
		for i, a := range args {
			oid := uint32(pgtype.ByteaArrayOID)
			if _, ok := a.(textArray); ok {
				oid = pgtype.TextArrayOID
			}
			var err error
			if b, err = m.Encode(oid, pgtype.BinaryFormatCode, a, b); err != nil {
				t.Fatalf("argument %d: %v", i, err)
			}
		}
		encoded = len(b)
	}
	encode()
	if size := paramsSize(args); size < encoded || size > encoded+20*len(args) {
		t.Errorf("paramsSize = %d, the parameters take %d bytes", size, encoded)
	}
	// The first buffer and the one it grows to.
	if allocs := testing.AllocsPerRun(20, encode); allocs > 2 && !raceEnabled {
		t.Errorf("encoding a batch's parameters (%d bytes) from pgx's 256-byte buffer: %.0f allocations, want 2", encoded, allocs)
	}
}

// TestReserveSend: a Bind message of a batch's size queued after reserveSend costs the
// frontend's buffer one allocation, not one per growth step of appends, and what goes out is
// the Bind alone.
func TestReserveSend(t *testing.T) {
	params := make([][]byte, 12)
	for i := range params {
		params[i] = make([]byte, 1000*(i+1))
	}
	bind := &pgproto3.Bind{PreparedStatement: "stmt", Parameters: params}
	want, err := bind.Encode(nil)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	f := pgproto3.NewFrontend(strings.NewReader(""), &out)
	send := func() {
		out.Reset()
		reserveSend(f, len(want))
		f.SendBind(bind)
		if err := f.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	send()
	if !bytes.Equal(out.Bytes(), want) {
		t.Fatalf("sent %d bytes, want the Bind's %d", out.Len(), len(want))
	}
	if allocs := testing.AllocsPerRun(20, send); allocs > 3 && !raceEnabled { // the reserved buffer, the 1 KB pgx shrinks to, the boxed reserveMsg
		t.Errorf("a %d-byte Bind: %.0f allocations, want 3", len(want), allocs)
	}
}

// batchSize is the registrations in batchArgs' batch.
const batchSize = 16

// batchArgs returns the parameters of a batch of batchSize registrations of 4-file shards
// (generator seed; bodies of body bytes when > 0) and the type map of an origin connection to
// encode them with (its AfterConnect registered the typed arrays).
func batchArgs(t *testing.T, seed uint64, body int) (*pgtype.Map, []any) {
	t.Helper()
	db, err := Open(t.Context(), Options{DSN: FreshSchema(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	g := indextest.NewGen(seed)
	var ops []*regOp
	for range batchSize {
		r := g.Registration("models/o/r", 4, 4, 4)
		if body > 0 {
			r.Body = make([]byte, body)
		}
		b, err := index.NewBatch(r)
		if err != nil {
			t.Fatal(err)
		}
		ops = append(ops, &regOp{ctx: context.Background(), b: b})
	}
	conn, err := db.pool.Acquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Release)
	return conn.Conn().TypeMap(), registerArgs(ops)
}
