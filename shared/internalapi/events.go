package internalapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/xetcdn/xetcdn/shared/xet/hash"
)

// Event is one visibility withdrawal: Files of Scope (nil: every file of it) are no longer
// visible there. Seq is the origin's sequence number, strictly increasing along the stream.
type Event struct {
	Seq   int64       `json:"seq"`
	Scope string      `json:"scope"`
	Files []hash.Hash `json:"files"` // null: every file of the scope
	At    time.Time   `json:"at"`    // when it was recorded (informational)
	// Xorbs, in the events of the origin's garbage collection, are xorbs it deleted: an edge
	// evicts their cached bytes. Absent in visibility events (older edges ignore the key).
	Xorbs []hash.Hash `json:"xorbs,omitempty"`
}

// eventsAnswer is the events answer, {"events":[…]}.
type eventsAnswer struct {
	Events []Event `json:"events"`
}

// AppendEvents appends the events answer {"events":[{"seq","scope","files","at"},…]} and a
// newline: encoding/json's encoding, with At in UTC and an empty list (never null) when evs is
// empty. A scope that is not valid UTF-8 (JSON would alter it) or a time that JSON cannot hold
// (year outside 0–9999) is an error.
func AppendEvents(dst []byte, evs []Event) ([]byte, error) {
	out := make([]Event, len(evs))
	for i, e := range evs {
		if !utf8.ValidString(e.Scope) {
			return nil, fmt.Errorf("internalapi: event %d: scope %q is not valid UTF-8", e.Seq, e.Scope)
		}
		e.At = e.At.UTC()
		out[i] = e
	}
	b, err := json.Marshal(eventsAnswer{Events: out})
	if err != nil {
		return nil, fmt.Errorf("internalapi: events answer: %w", err)
	}
	dst = append(dst, b...)
	return append(dst, '\n'), nil
}

// DecodeEvents decodes the events answer to a request for the events after seq after. Besides
// the JSON it checks what the edge relies on: "events" is a list, every event has a seq, a
// non-empty scope, a files key (a list, or null for the whole scope) and a time, and the
// sequence numbers are above after and strictly increasing. Unknown keys are ignored, so the
// origin may add fields. Answers longer than MaxEventsAnswer are refused unread. Errors wrap
// ErrMalformed.
func DecodeEvents(b []byte, after int64) ([]Event, error) {
	if len(b) > MaxEventsAnswer {
		return nil, fmt.Errorf("%w: events answer of %d bytes, limit %d", ErrMalformed, len(b), MaxEventsAnswer)
	}
	var probe struct {
		Events *[]struct {
			Seq   *int64          `json:"seq"`
			Scope *string         `json:"scope"`
			Files json.RawMessage `json:"files"`
			At    *time.Time      `json:"at"`
			Xorbs []hash.Hash     `json:"xorbs"`
		} `json:"events"`
	}
	if err := json.Unmarshal(b, &probe); err != nil {
		return nil, fmt.Errorf("%w: events answer: %w", ErrMalformed, err)
	}
	if probe.Events == nil {
		return nil, fmt.Errorf("%w: events answer without an events list", ErrMalformed)
	}
	raw := *probe.Events
	out := make([]Event, len(raw))
	last := after
	for i, r := range raw {
		switch {
		case r.Seq == nil || r.Scope == nil || r.Files == nil || r.At == nil:
			return nil, fmt.Errorf("%w: event %d lacks seq, scope, files or at", ErrMalformed, i)
		case *r.Seq <= last:
			return nil, fmt.Errorf("%w: event %d has seq %d after %d", ErrMalformed, i, *r.Seq, last)
		case *r.Scope == "":
			return nil, fmt.Errorf("%w: event %d (seq %d) has an empty scope", ErrMalformed, i, *r.Seq)
		}
		e := Event{Seq: *r.Seq, Scope: *r.Scope, At: *r.At, Xorbs: r.Xorbs}
		if !bytes.Equal(r.Files, []byte("null")) {
			if err := json.Unmarshal(r.Files, &e.Files); err != nil {
				return nil, fmt.Errorf("%w: event %d (seq %d) files: %w", ErrMalformed, i, *r.Seq, err)
			}
			if e.Files == nil { // not a list
				return nil, fmt.Errorf("%w: event %d (seq %d) files is not a list", ErrMalformed, i, *r.Seq)
			}
		}
		last = e.Seq
		out[i] = e
	}
	return out, nil
}
