package shard

import "github.com/xetcdn/xetcdn/shared/xet/hash"

// Record and section sizes.
const (
	RecordSize = 48
	HeaderSize = 48
	FooterSize = 200
	Version    = 2 // header version
	FooterVer  = 1 // footer version
	MaxSize    = 64 << 20
)

// File flag bits of a FileDataSequenceHeader.
const (
	FlagVerification uint32 = 1 << 31
	FlagMetadataExt  uint32 = 1 << 30
)

// ChunkFlagGlobalDedup marks a chunk in the xorb-info section as a global-dedup candidate.
const ChunkFlagGlobalDedup uint32 = 1 << 31

// Term is one FileDataSequenceEntry: a run of chunks [Start, End) of one xorb.
type Term struct {
	Xorb     hash.Hash
	Flags    uint32
	RawBytes uint32 // unpacked_segment_bytes
	Start    uint32
	End      uint32 // exclusive
}

// File is one file block of the file-info section.
type File struct {
	Hash  hash.Hash
	Terms []Term
	// Verification holds one range hash per term, or is nil when the file has none.
	Verification []hash.Hash
	// SHA256 is the metadata extension in shard byte order (see hash.FromSHA256), or nil.
	SHA256 *hash.Hash
}

// Size is the file size: the sum of its terms' RawBytes.
func (f *File) Size() uint64 {
	var n uint64
	for _, t := range f.Terms {
		n += uint64(t.RawBytes)
	}
	return n
}

// XorbChunk is one XorbChunkSequenceEntry.
type XorbChunk struct {
	Hash     hash.Hash // HMAC-keyed in dedup answers whose footer has a key
	RawStart uint32    // chunk_byte_range_start: uncompressed offset in the xorb
	RawLen   uint32    // unpacked_segment_bytes
	Flags    uint32
}

// Xorb is one block of the xorb-info section.
type Xorb struct {
	Hash        hash.Hash
	Flags       uint32
	RawBytes    uint32 // num_bytes_in_xorb
	BytesOnDisk uint32 // num_bytes_on_disk (hf_xet sends 0; do not rely on it)
	Chunks      []XorbChunk
}

// Footer is the 200-byte shard footer (the fields a dedup answer needs; lookup tables are
// never written by this package).
type Footer struct {
	HMACKey   hash.Hash
	CreatedAt uint64 // Unix seconds
	KeyExpiry uint64 // Unix seconds

	// Byte sums as the sender wrote them. Parse fills them in without checking them (huggingface.js
	// leaves MaterializedBytes 0); AppendWithFooter ignores them and writes the sums of the shard.
	StoredBytesOnDisk uint64 // Σ Xorb.BytesOnDisk
	MaterializedBytes uint64 // Σ File.Size()
	StoredBytes       uint64 // Σ Xorb.RawBytes
}

// Shard is a parsed shard. Footer is nil when the shard has none (upload bodies).
type Shard struct {
	Files  []File
	Xorbs  []Xorb
	Footer *Footer
}
