package main

import (
	"bytes"
	"context"
	mrand "math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/xetcdn/xetcdn/shared/xet/xorb"
	"github.com/xetcdn/xetcdn/shared/xetclient"
)

// scaleXorb builds a xorb of n incompressible 64 KiB chunks (stored raw: the store holds what
// was uploaded, so byte counts are easy to follow).
func scaleXorb(rng *mrand.ChaCha8, n int) xorbUp {
	chunks := make([][]byte, n)
	for i := range chunks {
		chunks[i] = make([]byte, 64<<10)
		rng.Read(chunks[i])
	}
	return packXorb(xorb.None, chunks)
}

// TestGCScale is issue 15's size test: repository a of N bytes shares two xorbs with repository
// b (which has one more of its own); a is deleted through the API and two collections a grace
// period apart run. The store (listed in the store itself: MinIO or the local directory)
// shrinks by exactly the unique bytes the usage report gave for a, b downloads byte-exact, and
// usage after agrees with the store. N is 24 MiB by default (both backends); the long form
// XETCDN_GC_SCALE_GIB=2 runs it on Postgres + MinIO only and logs the numbers.
func TestGCScale(t *testing.T) {
	total := int64(24 << 20)
	long := false
	if v := os.Getenv("XETCDN_GC_SCALE_GIB"); v != "" {
		gib, err := strconv.ParseFloat(v, 64)
		if err != nil || gib <= 0 || gib > 64 {
			t.Fatalf("XETCDN_GC_SCALE_GIB=%q: a number of GiB in (0, 64]", v)
		}
		total, long = int64(gib*(1<<30)), true
	}
	onEachBackend(t, func(t *testing.T, o *proc) {
		if long && !strings.HasSuffix(t.Name(), "postgres+minio") {
			t.Skip("the long form runs on Postgres + MinIO")
		}
		o.start(t)
		const a, b = "models/acme/scale-a", "models/acme/scale-b"
		// Xorbs of up to 1000 chunks (62.5 MiB), at least 8 of them in a; files of 2 xorbs.
		per := int(min(1000, total/8/(64<<10)))
		xorbBytes := int64(per) << 16
		nXorbs := int((total + xorbBytes - 1) / xorbBytes)
		nXorbs += nXorbs % 2
		rng := mrand.NewChaCha8([32]byte{15})
		wa := o.token(t, a, "write")
		start := time.Now()
		var sharedXorbs []xorbUp
		for i := 0; i < nXorbs; i += 2 {
			x1, x2 := scaleXorb(rng, per), scaleXorb(rng, per)
			if i == 0 {
				sharedXorbs = []xorbUp{x1, x2}
			}
			uploadFile(t, o, wa, makeFile(x1, x2))
		}
		fb := makeFile(sharedXorbs[0], sharedXorbs[1], scaleXorb(rng, per))
		uploadFile(t, o, o.token(t, b, "write"), fb)
		uploadSecs := time.Since(start).Seconds()

		u := o.usage(t, a)
		uniqueA := u.Scopes[0].UniqueBytes
		objsBefore := len(o.xorbObjects(t))
		before := o.storeBytes(t)
		shardsBefore := o.storeObjects(t, "shards")
		if u.Totals.StoredBytes != before || uniqueA == 0 {
			t.Fatalf("usage before: %+v; the store holds %d bytes", u, before)
		}
		if st, body := call(t, "DELETE", o.base()+"/v1/scope", wa, nil); st != http.StatusOK {
			t.Fatalf("delete %s: %d %s", a, st, body)
		}
		r1 := o.gc(t, 0)
		time.Sleep(1100 * time.Millisecond) // the grace period (gcGrace)
		gcStart := time.Now()
		r2 := o.gc(t, 0)
		gcWall := time.Since(gcStart).Seconds()
		after := o.storeBytes(t)
		objsAfter := len(o.xorbObjects(t))
		if before-after != uniqueA || r2.BytesReclaimed != uniqueA || r1.Condemned != int64(nXorbs-2) {
			t.Errorf("store: %d → %d bytes (-%d), gc reclaimed %d (condemned %d); want -%d, a's unique bytes (%d xorbs)",
				before, after, before-after, r2.BytesReclaimed, r1.Condemned, uniqueA, nXorbs-2)
		}
		if got := o.storeObjects(t, "shards"); len(got) != len(shardsBefore) {
			t.Errorf("shard objects: %d before, %d after", len(shardsBefore), len(got))
		}
		c, err := xetclient.New(xetclient.Options{Endpoint: o.base(), Token: o.token(t, b, "read")})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		var buf bytes.Buffer
		if _, err := c.Download(ctx, fb.hash, &buf, xetclient.DownloadOptions{}); err != nil || !bytes.Equal(buf.Bytes(), fb.data) {
			t.Fatalf("b after the collection: %v, %d bytes (want %d equal)", err, buf.Len(), len(fb.data))
		}
		ua := o.usage(t)
		if ua.Totals.StoredBytes != after || len(ua.Scopes) != 1 || ua.Scopes[0].Scope != b || ua.Scopes[0].UniqueBytes != after {
			t.Errorf("usage after: %+v; the store holds %d bytes", ua, after)
		}
		t.Logf("a: %d bytes logical in %d xorbs (%d shared with b), uploaded with b in %.1fs; store %d → %d bytes (%d → %d xorb objects), "+
			"a's unique bytes (usage) %d; gc: condemn run %.2fs, sweep run %.2fs (report %.2fs), %d objects deleted, %d bytes reclaimed",
			int64(nXorbs)*xorbBytes, nXorbs, 2, uploadSecs, before, after, objsBefore, objsAfter, uniqueA,
			r1.Seconds, gcWall, r2.Seconds, r2.ObjectsDeleted, r2.BytesReclaimed)
	})
}
