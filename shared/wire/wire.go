// Package wire holds the JSON shapes of the Xet CAS API (docs/protocol.md §2) for Go clients and
// tests: reconstruction answers (v1 and v2), upload results, the NDJSON frames of /v2/shards, the
// Hub token answer and xetcdn's JSON error body.
//
// Hashes are hash.Hash values, which encode and decode in the protocol's string form, also as
// map keys. The servers encode their small answers (uploads, frames, tokens, errors) with these
// types; they write reconstruction answers (single and batch) with package recon, hand-encoded
// for speed, and tests check those bytes decode to the same values as these types' encoding.
// The stock client treats every documented field as required, so Validate checks presence
// where encoding/json cannot.
package wire

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/xetcdn/xetcdn/shared/xet/hash"
)

// ErrShape reports a decoded answer that misses a required field or breaks a protocol rule.
var ErrShape = errors.New("wire: invalid answer")

// ChunkRange is a half-open chunk index range [start, end).
type ChunkRange struct {
	Start uint32 `json:"start"`
	End   uint32 `json:"end"`
}

// ByteRange is a closed byte range [start, end] (both inclusive).
type ByteRange struct {
	Start uint64 `json:"start"`
	End   uint64 `json:"end"`
}

// Term is one reconstruction term: chunks Range of xorb Hash, UnpackedLength bytes once
// decompressed.
type Term struct {
	Hash           hash.Hash  `json:"hash"`
	UnpackedLength uint32     `json:"unpacked_length"`
	Range          ChunkRange `json:"range"`
}

// RangeDescriptor is one range of a v2 fetch entry.
type RangeDescriptor struct {
	Chunks ChunkRange `json:"chunks"`
	Bytes  ByteRange  `json:"bytes"`
}

// MultiRangeFetch is a v2 fetch entry: one URL serving all its ranges.
type MultiRangeFetch struct {
	URL    string            `json:"url"`
	Ranges []RangeDescriptor `json:"ranges"`
}

// QueryReconstructionResponseV2 is the body of GET /v2/reconstructions/{file}.
type QueryReconstructionResponseV2 struct {
	OffsetIntoFirstRange uint64                          `json:"offset_into_first_range"`
	Terms                []Term                          `json:"terms"`
	Xorbs                map[hash.Hash][]MultiRangeFetch `json:"xorbs"`
}

// FetchInfo is a v1 fetch entry: one URL per range.
type FetchInfo struct {
	Range    ChunkRange `json:"range"`
	URL      string     `json:"url"`
	URLRange ByteRange  `json:"url_range"`
}

// QueryReconstructionResponse is the body of GET /v1/reconstructions/{file}.
type QueryReconstructionResponse struct {
	OffsetIntoFirstRange uint64                    `json:"offset_into_first_range"`
	Terms                []Term                    `json:"terms"`
	FetchInfo            map[hash.Hash][]FetchInfo `json:"fetch_info"`
}

// BatchQueryReconstructionResponse is the body of the batch reconstruction routes
// (GET /v1/reconstructions?file_id=…, POST /v1/reconstructions; docs/protocol.md §2.9): the
// v1 terms of each file, and per xorb the v1 fetch entries that cover all of them.
type BatchQueryReconstructionResponse struct {
	Files     map[hash.Hash][]Term      `json:"files"`
	FetchInfo map[hash.Hash][]FetchInfo `json:"fetch_info"`
}

// ToV2 converts a v1 answer the way the client does: each fetch_info entry becomes a one-range
// v2 entry.
func (r *QueryReconstructionResponse) ToV2() *QueryReconstructionResponseV2 {
	out := &QueryReconstructionResponseV2{
		OffsetIntoFirstRange: r.OffsetIntoFirstRange,
		Terms:                r.Terms,
		Xorbs:                make(map[hash.Hash][]MultiRangeFetch, len(r.FetchInfo)),
	}
	for h, fis := range r.FetchInfo {
		entries := make([]MultiRangeFetch, len(fis))
		for i, fi := range fis {
			entries[i] = MultiRangeFetch{URL: fi.URL, Ranges: []RangeDescriptor{{Chunks: fi.Range, Bytes: fi.URLRange}}}
		}
		out.Xorbs[h] = entries
	}
	return out
}

// DecodeV2 decodes and validates a v2 answer. It checks what serde in the stock client would
// reject (a missing offset_into_first_range, terms or xorbs) and then Validate.
func DecodeV2(data []byte) (*QueryReconstructionResponseV2, error) {
	var probe struct {
		Offset *uint64          `json:"offset_into_first_range"`
		Terms  *json.RawMessage `json:"terms"`
		Xorbs  *json.RawMessage `json:"xorbs"`
	}
	if err := json.Unmarshal(data, &probe); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrShape, err)
	}
	if probe.Offset == nil || probe.Terms == nil || probe.Xorbs == nil {
		return nil, fmt.Errorf("%w: offset_into_first_range, terms and xorbs are required", ErrShape)
	}
	var r QueryReconstructionResponseV2
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrShape, err)
	}
	if err := r.Validate(); err != nil {
		return nil, err
	}
	return &r, nil
}

// Validate applies the client's consistency rules: terms and xorbs present (possibly empty),
// every term covered by a range of its xorb (chunks.start <= start and end <= chunks.end), no
// entry without ranges, chunk and byte ranges non-empty, ranges in an entry sorted by chunk start.
func (r *QueryReconstructionResponseV2) Validate() error {
	if r.Terms == nil || r.Xorbs == nil {
		return fmt.Errorf("%w: terms and xorbs are required", ErrShape)
	}
	for h, entries := range r.Xorbs {
		for i, e := range entries {
			if len(e.Ranges) == 0 {
				return fmt.Errorf("%w: xorb %s entry %d has no ranges", ErrShape, h, i)
			}
			for k, rd := range e.Ranges {
				if rd.Chunks.Start >= rd.Chunks.End || rd.Bytes.End < rd.Bytes.Start {
					return fmt.Errorf("%w: xorb %s entry %d range %d is empty", ErrShape, h, i, k)
				}
				if k > 0 && rd.Chunks.Start < e.Ranges[k-1].Chunks.Start {
					return fmt.Errorf("%w: xorb %s entry %d ranges not sorted", ErrShape, h, i)
				}
			}
		}
	}
	for i, t := range r.Terms {
		if t.Range.Start >= t.Range.End {
			return fmt.Errorf("%w: term %d has empty range", ErrShape, i)
		}
		if !covered(r.Xorbs[t.Hash], t.Range) {
			return fmt.Errorf("%w: no fetch entry for term %d (xorb %s chunks [%d,%d))", ErrShape, i, t.Hash, t.Range.Start, t.Range.End)
		}
	}
	return nil
}

func covered(entries []MultiRangeFetch, c ChunkRange) bool {
	for _, e := range entries {
		for _, rd := range e.Ranges {
			if rd.Chunks.Start <= c.Start && c.End <= rd.Chunks.End {
				return true
			}
		}
	}
	return false
}

// UploadXorbResponse is the body of POST /v1/xorbs/{prefix}/{hash}.
type UploadXorbResponse struct {
	WasInserted bool `json:"was_inserted"`
}

// Shard upload results (the only two values the client accepts).
const (
	ShardExists        = 0
	ShardSyncPerformed = 1
)

// UploadShardResponse is the body of POST /v1/shards.
type UploadShardResponse struct {
	Result int `json:"result"`
}

// Frame types of the /v2/shards NDJSON stream.
const (
	FrameValidating = "validating"
	FrameCommitting = "committing"
	FrameResult     = "result"
	FrameError      = "error"
	// FrameHeartbeat is xetcdn's keep-alive; clients ignore unknown types.
	FrameHeartbeat = "heartbeat"
)

// Committing stages.
const (
	StageUploading = "uploading"
	StageSyncing   = "syncing"
)

// Frame is one line of the /v2/shards stream, for decoding any type. Use the typed frames below
// to encode: they always write the fields their type requires.
type Frame struct {
	Type      string `json:"type"`
	Verified  uint64 `json:"verified,omitempty"`
	Total     uint64 `json:"total,omitempty"`
	Stage     string `json:"stage,omitempty"`
	Result    *int   `json:"result,omitempty"`
	Message   string `json:"message,omitempty"`
	Retryable bool   `json:"retryable,omitempty"`
}

// Terminal reports whether the frame ends the stream.
func (f *Frame) Terminal() bool { return f.Type == FrameResult || f.Type == FrameError }

// ValidatingFrame is {"type":"validating","verified":N,"total":N}.
type ValidatingFrame struct {
	Type     string `json:"type"`
	Verified uint64 `json:"verified"`
	Total    uint64 `json:"total"`
}

// CommittingFrame is {"type":"committing","stage":"uploading"|"syncing"}.
type CommittingFrame struct {
	Type  string `json:"type"`
	Stage string `json:"stage"`
}

// ResultFrame is {"type":"result","result":0|1}.
type ResultFrame struct {
	Type   string `json:"type"`
	Result int    `json:"result"`
}

// ErrorFrame is {"type":"error","message":"…","retryable":bool}.
type ErrorFrame struct {
	Type      string `json:"type"`
	Message   string `json:"message"`
	Retryable bool   `json:"retryable"`
}

// HeartbeatFrame is {"type":"heartbeat"}.
type HeartbeatFrame struct {
	Type string `json:"type"`
}

// Validating, Committing, Result, Error and Heartbeat build frames with their type set.
func Validating(verified, total uint64) ValidatingFrame {
	return ValidatingFrame{Type: FrameValidating, Verified: verified, Total: total}
}

// Committing builds a committing frame.
func Committing(stage string) CommittingFrame {
	return CommittingFrame{Type: FrameCommitting, Stage: stage}
}

// Result builds a result frame.
func Result(result int) ResultFrame { return ResultFrame{Type: FrameResult, Result: result} }

// Error builds an error frame.
func Error(message string, retryable bool) ErrorFrame {
	return ErrorFrame{Type: FrameError, Message: message, Retryable: retryable}
}

// Heartbeat builds a heartbeat frame.
func Heartbeat() HeartbeatFrame { return HeartbeatFrame{Type: FrameHeartbeat} }

// Token is the Hub-compatible token answer {casUrl, exp, accessToken}; Exp is Unix seconds.
type Token struct {
	CasURL      string `json:"casUrl"`
	Exp         int64  `json:"exp"`
	AccessToken string `json:"accessToken"`
}

// ErrorBody is xetcdn's JSON error body: a human message and a short stable code.
type ErrorBody struct {
	Error string `json:"error"`
	Code  string `json:"code"`
}
