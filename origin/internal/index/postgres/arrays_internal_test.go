package postgres

import (
	"context"
	"testing"

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
	db, err := Open(t.Context(), Options{DSN: FreshSchema(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	g := indextest.NewGen(301)
	var ops []*regOp
	for range 16 {
		b, err := index.NewBatch(g.Registration("models/o/r", 4, 4, 4))
		if err != nil {
			t.Fatal(err)
		}
		ops = append(ops, &regOp{ctx: context.Background(), b: b})
	}
	conn, err := db.pool.Acquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	m := conn.Conn().TypeMap()
	args := registerArgs(ops)
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
			len(args), elems, len(ops), allocs, len(args))
	}
}
