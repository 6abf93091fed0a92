package xetclient_test

import (
	"bytes"
	"testing"

	"github.com/xetcdn/xetcdn/shared/xet/chunk"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
	"github.com/xetcdn/xetcdn/shared/xetclient"
)

// TestE2EVersionChainDedup uploads consecutive versions of a file, each in a fresh client
// session (no state shared between them, as the trace replayer and a CI job do), against the
// real origin binary, and bounds the bytes each version sends by the bytes it changed: the
// global dedup route alone must let version k find the blocks that versions 1..k-1 introduced,
// not only those of version 0, also when a version changes the file's first block (issue 13,
// fine-tune scenario; docs/decisions.md 2026-12-01 "Dedup answers follow file versions").
func TestE2EVersionChainDedup(t *testing.T) {
	o := startOrigin(t)
	const scope = "models/acme/finetune"
	write, read := o.token(t, scope, "write"), o.token(t, scope, "read")
	const block = 1 << 20
	data := randBytes(70, 16*block)
	upload(t, newClient(t, o.url, func(opts *xetclient.Options) { opts.Token = write }), data)
	// stored: the chunks of every version uploaded so far.
	stored := map[hash.Hash]bool{}
	novel := func(data []byte) int64 { return novelBytes(t, stored, data) }
	novel(data)
	// Blocks each version rewrites; version 2 rewrites the first block, so its first chunk
	// (the one a client always asks about) is one version 0 never had.
	changes := [][]int{{3, 11}, {0, 7}, {5, 13}, {2, 9}}
	for v, blocks := range changes {
		data = bytes.Clone(data)
		for i, b := range blocks {
			copy(data[b*block:(b+1)*block], randBytes(uint64(1000+10*v+i), block))
		}
		changed, ideal := int64(len(blocks)*block), novel(data)
		c := newClient(t, o.url, func(opts *xetclient.Options) { opts.Token = write })
		sent := totalSent(upload(t, c, data))
		t.Logf("version %d: sent %d bytes for %d changed (%.3fx), %d in new chunks (%.3fx)",
			v+1, sent, changed, float64(sent)/float64(changed), ideal, float64(sent)/float64(ideal))
		// On top of the new chunks: 8 bytes of chunk header each, and the shard's records
		// (a few KiB here). Packing the chunks between the rewritten first block of version 2
		// and the anchor whose answer covers them (rather than holding them back) is 16 KiB
		// more.
		if limit := ideal + ideal/400 + 8<<10; sent > limit {
			t.Errorf("version %d sent %d bytes, want at most %d (new chunks %d, changed blocks %d)",
				v+1, sent, limit, ideal, changed)
		}
		if v == len(changes)-1 {
			r := newClient(t, o.url, func(opts *xetclient.Options) { opts.Token = read })
			h := upload(t, c, data)[0].FileHash
			if got := download(t, r, h, xetclient.DownloadOptions{}); !bytes.Equal(got, data) {
				t.Fatalf("version %d downloads different bytes", v+1)
			}
		}
	}
}

// TestE2EReuploadOldVersion: uploading an old version of a file again, byte for byte (a
// revert, a second job publishing the same checkpoint), registers a shard the origin already
// has. It must not take the file's dedup entries back from the newer versions: the old shard
// offers only the xorbs of its time, so the next upload of a version between them would send
// again the chunks the server holds (issue 13: the warm pass of the fine-tune replay re-sent
// 7.7 MB where 0 were new).
func TestE2EReuploadOldVersion(t *testing.T) {
	o := startOrigin(t)
	write := o.token(t, "models/acme/revert", "write")
	const block = 1 << 20
	v0 := randBytes(71, 12*block)
	v2 := bytes.Clone(v0)
	for i, b := range []int{3, 7} {
		copy(v2[b*block:(b+1)*block], randBytes(uint64(2000+i), block))
	}
	up := func(data []byte) int64 { return sentFresh(t, o.url, write, data) }
	// v1 = v0 and v3 = v2: the shards of v0's second upload and of v1 are the same bytes.
	for _, data := range [][]byte{v0, v0, v2, v2} {
		up(data)
	}
	up(v0)
	if sent := up(v2); sent > 16<<10 {
		t.Errorf("version 2 again, after version 0 again: sent %d bytes, want only a shard (all its chunks are stored)", sent)
	}
}

// TestE2EChangedFirstTensor: a new version that rewrites a file's first 12 MiB in one piece (a
// retrained first tensor, e.g. the embeddings) changes every chunk the first anchors cover
// (~4 MiB), and a 40 MiB file has few or no chunks of the stock rule (one in 1,024, ~64 MiB
// apart) in the rest. The stride anchors (shard.AnchorPicker) let the client, in a fresh
// session, find the previous version past the changed bytes and send only the new chunks, not
// the whole file (docs/protocol.md §8.6, [xetcdn]).
func TestE2EChangedFirstTensor(t *testing.T) {
	changedHead(t, "models/acme/embeddings", 12<<20)
}

// TestE2EResizedFirstTensor: as TestE2EChangedFirstTensor, but the new first 12 MiB are
// 1,000,003 bytes longer (a resized embedding: new tokens), so every later chunk starts at
// another file offset. Stride anchors chosen by file offset found none of the previous
// version's there; chosen by content, they are the same chunks.
func TestE2EResizedFirstTensor(t *testing.T) {
	changedHead(t, "models/acme/resized", 12<<20+1_000_003)
}

// changedHead uploads a 40 MiB file, then a version whose first 12 MiB are replaced by
// headLen new bytes, each in a fresh session, and bounds what the second upload sends by its
// new chunks.
func changedHead(t *testing.T, scope string, headLen int) {
	o := startOrigin(t)
	write := o.token(t, scope, "write")
	const mib = 1 << 20
	v0 := randBytes(72, 40*mib)
	v1 := append(randBytes(3000, headLen), v0[12*mib:]...)
	sentFresh(t, o.url, write, v0)
	stored := map[hash.Hash]bool{}
	novelBytes(t, stored, v0)
	ideal := novelBytes(t, stored, v1)
	sent := sentFresh(t, o.url, write, v1)
	t.Logf("sent %d bytes for the first 12 MiB replaced by %d bytes, %d in new chunks (%.3fx)", sent, headLen, ideal, float64(sent)/float64(ideal))
	if limit := ideal + ideal/400 + 8<<10; sent > limit {
		t.Errorf("sent %d bytes, want at most %d (new chunks %d of a %d-byte file)", sent, limit, ideal, len(v1))
	}
}

// novelBytes returns the bytes of data's chunks that are not in stored, what a perfect client
// sends (content-defined chunks straddle a rewritten region's edges, so it is a little more
// than the region), and adds data's chunks to stored.
func novelBytes(t *testing.T, stored map[hash.Hash]bool, data []byte) int64 {
	t.Helper()
	chunks, _, err := chunk.HashAll(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, c := range chunks {
		if !stored[c.Hash] {
			n += int64(c.Len)
		}
		stored[c.Hash] = true
	}
	return n
}

// sentFresh uploads data in a new client session with token and returns the bytes it sent.
func sentFresh(t *testing.T, url, token string, data []byte) int64 {
	t.Helper()
	return totalSent(upload(t, newClient(t, url, func(opts *xetclient.Options) { opts.Token = token }), data))
}
