// Package internalapi is the contract of the internal API between the origin and its edges
// (docs/protocol.md §16.3): the route paths and query parameter names, the limits, and the
// codecs of what the routes exchange — the binary layouts answer, the JSON events answer and the
// checks on a file record answer. The origin serves with it and the edge's client
// (edge/internal/originapi) calls with it, so the two tiers cannot drift apart.
//
// The codecs are pure: no network, no logging. Decoders trust nothing: every error wraps
// ErrMalformed, input longer than the format's bound is refused before it is parsed, and no
// decoder allocates more than a small multiple of its input.
package internalapi

import (
	"errors"
	"net/url"
	"strconv"
	"time"

	"github.com/xetcdn/xetcdn/shared/xet/hash"
	"github.com/xetcdn/xetcdn/shared/xet/xorb"
)

// ErrMalformed reports an answer that breaks the format: truncated, oversized, with trailing
// bytes, with an entry not asked for, or with a value that does not decode.
var ErrMalformed = errors.New("internalapi: malformed answer")

// Routes of the internal API. FilesPath and XorbsPath are followed by a hash in its string form
// (docs/protocol.md §1); the patterns are the ones the origin registers (with the method).
const (
	// FilesPath + file: GET → the binary file record if the file is visible in the scope
	// parameter, else 404; HEAD → the same status without a body.
	FilesPath = "/internal/v1/files/"
	// LayoutsPath?h=H&h=H… → the layouts answer (AppendLayouts).
	LayoutsPath = "/internal/v1/layouts"
	// XorbsPath + xorb: GET, with at most one Range → the raw stored object or a 206 slice.
	XorbsPath = "/internal/v1/xorbs/"
	// JWKSPath → the token verification keys (shared/auth).
	JWKSPath = "/internal/v1/jwks"
	// EventsPath?after=N[&wait=SECONDS] → the events answer (AppendEvents).
	EventsPath = "/internal/v1/events"

	// PathValueHash names the hash segment of FilesPattern and XorbsPattern.
	PathValueHash = "hash"
	FilesPattern  = FilesPath + "{" + PathValueHash + "}"
	XorbsPattern  = XorbsPath + "{" + PathValueHash + "}"
)

// Query parameter names.
const (
	ParamScope = "scope" // files: the scope the file must be visible in (required)
	ParamHash  = "h"     // layouts: one xorb hash, repeated
	ParamAfter = "after" // events: the last sequence number seen (0 or absent: from the start)
	ParamWait  = "wait"  // events: whole seconds to wait for an event when there is none
)

// Limits of the contract.
const (
	// MaxLayoutsPerRequest is the most h parameters one layouts request may carry.
	MaxLayoutsPerRequest = 1024
	// MaxLayoutBytes is the longest binary layout (xorb.Layout.MarshalBinary of a xorb with
	// xorb.MaxChunks chunks: version, count, hash, then 40 bytes per chunk).
	MaxLayoutBytes = 1 + 4 + hash.Size + 40*xorb.MaxChunks
	// MaxFileAnswer bounds the file record answer an edge reads.
	MaxFileAnswer = 512 << 20
	// MaxEventsAnswer bounds the events answer an edge reads.
	MaxEventsAnswer = 512 << 20
)

// layoutEntryHead is the framing before each layout: raw hash and u32 length.
const layoutEntryHead = hash.Size + 4

// MaxLayoutsAnswer is the longest layouts answer to a request for n distinct hashes.
func MaxLayoutsAnswer(n int) int64 {
	return 4 + int64(n)*(layoutEntryHead+MaxLayoutBytes)
}

// FileTarget is the request target (path and query) of the file route for file h in scope.
func FileTarget(h hash.Hash, scope string) string {
	return FilesPath + h.String() + "?" + ParamScope + "=" + url.QueryEscape(scope)
}

// XorbTarget is the request target of the xorb route for xorb h.
func XorbTarget(h hash.Hash) string { return XorbsPath + h.String() }

// LayoutsTarget is the request target of the layouts route for hs, one h parameter per hash in
// order (repeats included).
func LayoutsTarget(hs []hash.Hash) string {
	q := make([]byte, 0, len(LayoutsPath)+len(hs)*(len(ParamHash)+2+2*hash.Size))
	q = append(q, LayoutsPath...)
	for i, h := range hs {
		if i == 0 {
			q = append(q, '?')
		} else {
			q = append(q, '&')
		}
		q = append(q, ParamHash+"="...)
		q = h.AppendString(q)
	}
	return string(q)
}

// EventsTarget is the request target of the events route: events after seq, waiting up to wait
// (whole seconds, rounded down) for one.
func EventsTarget(after int64, wait time.Duration) string {
	return EventsPath + "?" + ParamAfter + "=" + strconv.FormatInt(after, 10) + "&" + ParamWait + "=" +
		strconv.FormatInt(int64(wait/time.Second), 10)
}
