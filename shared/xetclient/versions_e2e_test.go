package xetclient_test

import (
	"bytes"
	"testing"

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
	// Blocks each version rewrites; version 2 rewrites the first block, so its first chunk
	// (the one a client always asks about) is one version 0 never had.
	changes := [][]int{{3, 11}, {0, 7}, {5, 13}, {2, 9}}
	for v, blocks := range changes {
		data = bytes.Clone(data)
		for i, b := range blocks {
			copy(data[b*block:(b+1)*block], randBytes(uint64(1000+10*v+i), block))
		}
		changed := int64(len(blocks) * block)
		c := newClient(t, o.url, func(opts *xetclient.Options) { opts.Token = write })
		sent := totalSent(upload(t, c, data))
		ratio := float64(sent) / float64(changed)
		t.Logf("version %d: sent %d bytes for %d changed (%.3fx)", v+1, sent, changed, ratio)
		// Content-defined chunk boundaries do not fall on block boundaries: each rewritten
		// block also takes along the chunks around its two edges (64 KiB each on average),
		// and the shard's records travel too.
		if ratio > 1.25 {
			t.Errorf("version %d sent %.2fx the changed bytes, want at most 1.25x", v+1, ratio)
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
