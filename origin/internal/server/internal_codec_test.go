package server

import (
	"bytes"
	"context"
	"strconv"
	"testing"

	"github.com/xetcdn/xetcdn/shared/auth"
	"github.com/xetcdn/xetcdn/shared/internalapi"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
)

// TestInternalAnswersMatchCodec checks the origin's internal answers byte for byte against the
// shared codec (shared/internalapi) over the data the index holds, and that the codec's strict
// decoders, which the edge uses, accept them: the layouts answer (with a missing and a repeated
// hash), the events answer (one file, a whole scope, and none), and the file record answer.
func TestInternalAnswersMatchCodec(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			e := newEnv(t, b)
			ctx := context.Background()
			f, g := makeFixture(t, 41, 3, 3, 700), makeFixture(t, 42, 2, 5, 300)
			e.upload(f, "models/a/b")
			e.upload(g, "datasets/c&d <e>")
			edge := e.token("edge-eu", auth.Edge)

			rec := expect(t, e.do("GET", internalapi.FileTarget(f.file, "models/a/b"), edge, nil), 200)
			want, err := e.idx.File(ctx, f.file, "models/a/b")
			if err != nil {
				t.Fatal(err)
			}
			got, err := internalapi.DecodeFile(rec, f.file)
			if err != nil || got.Size != want.Size || len(got.Terms) != len(want.Terms) {
				t.Fatalf("file answer: %v", err)
			}
			if enc, _ := internalapi.EncodeFile(want); !bytes.Equal(rec, enc) {
				t.Fatal("file answer differs from the record's encoding")
			}

			missing := hash.Chunk([]byte("missing"))
			ask := []hash.Hash{g.layouts[1].Hash, missing, f.layouts[0].Hash, g.layouts[1].Hash, f.layouts[2].Hash}
			body := expect(t, e.do("GET", internalapi.LayoutsTarget(ask), edge, nil), 200)
			raw, err := e.idx.LayoutBytes(ctx, ask)
			if err != nil {
				t.Fatal(err)
			}
			enc, err := internalapi.AppendLayouts(nil, ask, raw)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(body, enc) {
				t.Fatalf("layouts answer differs from the codec's:\n got  %x\n want %x", body[:min(len(body), 100)], enc[:min(len(enc), 100)])
			}
			ls, err := internalapi.DecodeLayouts(body, ask)
			if err != nil || len(ls) != 3 || ls[g.layouts[1].Hash].NumChunks() != 5 {
				t.Fatalf("layouts answer decodes to %d layouts: %v", len(ls), err)
			}

			empty := expect(t, e.do("GET", internalapi.EventsTarget(0, 0), edge, nil), 200)
			if enc, _ := internalapi.AppendEvents(nil, nil); !bytes.Equal(empty, enc) {
				t.Fatalf("empty events answer %q, codec %q", empty, enc)
			}
			if err := e.idx.Hide(ctx, "models/a/b", []hash.Hash{f.file}); err != nil {
				t.Fatal(err)
			}
			if err := e.idx.Hide(ctx, "datasets/c&d <e>", nil); err != nil {
				t.Fatal(err)
			}
			body = expect(t, e.do("GET", internalapi.EventsTarget(0, 0), edge, nil), 200)
			evs, err := e.idx.Events(ctx, 0, 0)
			if err != nil || len(evs) != 2 {
				t.Fatalf("index events %v %v", evs, err)
			}
			in := make([]internalapi.Event, len(evs))
			for i, ev := range evs {
				in[i] = internalapi.Event{Seq: ev.Seq, Scope: ev.Scope, Files: ev.Files, At: ev.At}
			}
			if enc, _ := internalapi.AppendEvents(nil, in); !bytes.Equal(body, enc) {
				t.Fatalf("events answer differs from the codec's:\n got  %s\n want %s", body, enc)
			}
			dec, err := internalapi.DecodeEvents(body, 0)
			if err != nil || len(dec) != 2 || dec[0].Files[0] != f.file || dec[1].Files != nil || dec[1].Scope != "datasets/c&d <e>" {
				t.Fatalf("events answer decodes to %+v: %v", dec, err)
			}
			last := strconv.FormatInt(dec[1].Seq, 10)
			body = expect(t, e.do("GET", internalapi.EventsPath+"?after="+last+"&wait=0", edge, nil), 200)
			if enc, _ := internalapi.AppendEvents(nil, nil); !bytes.Equal(body, enc) {
				t.Fatalf("events answer after the last %q, codec %q", body, enc)
			}
		})
	}
}
