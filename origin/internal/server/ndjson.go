package server

import (
	"encoding/json"
	"net/http"
	"sync"
	"time"

	"github.com/xetcdn/xetcdn/origin/internal/ingest"
	"github.com/xetcdn/xetcdn/shared/httpapi"
	"github.com/xetcdn/xetcdn/shared/wire"
)

// NDJSON frames of POST /v2/shards (docs/protocol.md §2.7): the typed frames of shared/wire,
// one JSON object and a newline each.
func encodeFrame(f any) []byte {
	b, _ := json.Marshal(f) // a frame always encodes
	return append(b, '\n')
}

func progressFrame(p ingest.Progress) []byte {
	if p.Stage == ingest.StageValidating {
		return encodeFrame(wire.Validating(p.Verified, p.Total))
	}
	return encodeFrame(wire.Committing(p.Stage))
}

func resultFrame(inserted bool) []byte {
	r := wire.ShardExists
	if inserted {
		r = wire.ShardSyncPerformed
	}
	return encodeFrame(wire.Result(r))
}

// errorFrame reports a failure after streaming started; the client re-uploads the shard when
// retryable (server-side trouble), and gives up otherwise (the shard is bad).
func errorFrame(err error, status int) []byte {
	retry := status >= 500 || status == http.StatusRequestTimeout
	return encodeFrame(wire.Error(httpapi.PublicMessage(status, err), retry))
}

type shardOutcome struct {
	inserted bool
	err      error
}

// frameStream writes NDJSON frames for one request. progress may be called from any goroutine;
// it only records the latest frame, which run writes (so a slow client never stalls the work
// and intermediate frames may be skipped). write and run belong to the handler goroutine.
type frameStream struct {
	w         http.ResponseWriter
	rc        *http.ResponseController
	heartbeat time.Duration
	started   bool // the 200 and at least one frame were sent

	mu     sync.Mutex
	last   []byte
	notify chan struct{}
}

func newFrameStream(w http.ResponseWriter, heartbeat time.Duration) *frameStream {
	return &frameStream{w: w, rc: http.NewResponseController(w), heartbeat: heartbeat,
		notify: make(chan struct{}, 1)}
}

func (st *frameStream) progress(p ingest.Progress) {
	f := progressFrame(p)
	st.mu.Lock()
	st.last = f
	st.mu.Unlock()
	select {
	case st.notify <- struct{}{}:
	default:
	}
}

// run writes progress frames as they come and re-sends the last one every heartbeat until the
// work reports its outcome.
func (st *frameStream) run(done <-chan shardOutcome) shardOutcome {
	t := time.NewTicker(st.heartbeat)
	defer t.Stop()
	for {
		select {
		case o := <-done:
			st.mu.Lock()
			f := st.last
			st.mu.Unlock()
			if f != nil && !st.started {
				st.write(f) // the work had begun reporting: its outcome is a frame too
			}
			return o
		case <-st.notify:
		case <-t.C:
		}
		st.mu.Lock()
		f := st.last
		st.mu.Unlock()
		if f != nil {
			st.write(f)
		}
	}
}

// write sends one frame, starting the 200 answer if needed, and flushes it.
func (st *frameStream) write(f []byte) {
	if !st.started {
		h := st.w.Header()
		h.Set("Content-Type", "application/x-ndjson")
		h.Set("Cache-Control", "no-cache")
		st.w.WriteHeader(http.StatusOK)
		st.started = true
	}
	_, _ = st.w.Write(f) // a failed write means the client left; the work is cancelled with it
	_ = st.rc.Flush()
}
