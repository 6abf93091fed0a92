package postgres

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/xetcdn/xetcdn/origin/internal/index"
	"github.com/xetcdn/xetcdn/origin/internal/index/chunkbloom"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
)

// The dedup filter on Postgres (docs/decisions.md, "2026-12-02: a dedup filter on Postgres";
// docs/origin.md, "Dedup filter"): a Bloom filter of the dedup table's chunks that answers the
// global-dedup query's misses — one per uploaded file with hf_xet, nearly all misses on a
// small-file upload — without a round trip (issue 13, perf/BENCHMARKS.md "small-file uploads").
//
// Several origins share the table, so the filter follows the others' registrations too:
//   - this origin's own chunks are added before the transaction that inserts them commits
//     (register), so the filter never says "absent" for an entry this origin registered;
//   - after a registration commits, its chunks are announced with NOTIFY on dedupChannel
//     (notifyDedup; best effort, after the commit so that registrations never wait on
//     Postgres's notify lock), and every origin's listener adds the others' chunks;
//   - the filter is in use only while its listener holds a live LISTEN session: the listener
//     proves it at least every dedupHeartbeat (a notification or a ping, which returns the
//     notifications committed before it), and the filter answers nothing once dedupLease has
//     passed since the last proof or the session failed; a new session rebuilds the filter;
//   - a build LISTENs first, then scans the table; every registration committed after the
//     scan's snapshot notifies after that commit, so reaches the listener.
//
// What is not covered: an origin that dies between its commit and its NOTIFY (or whose NOTIFY
// fails) leaves the others without those chunks until their next rebuild, every
// Options.DedupFilterReload. A stale "absent" costs a redundant upload of bytes the origin
// already has, never a wrong answer: dedup is an optimisation, and the upload is checked and
// stored as any other.
type dedupFilter struct {
	seed   chunkbloom.Seed // per process, so that probe positions cannot be chosen from outside
	self   string          // this process's prefix of its notifications (it skips its own)
	reload time.Duration   // a rebuild at least this often

	start sync.Once
	done  chan struct{} // closed when the listener has stopped

	mu      sync.Mutex                       // orders adds against a build's switch to a new filter
	cur     atomic.Pointer[chunkbloom.Bloom] // nil while the filter is out of use
	pending *chunkbloom.Bloom                // being built: adds go to it too
	// inflight counts this origin's registrations that added their chunks and have not ended
	// (committed or failed); a build replaces it and waits for the old one before it scans,
	// so that a registration that added to no filter, or to the old one only, is in the scan.
	inflight *sync.WaitGroup
	epoch    uint64       // counts listener sessions; a build of an older one is dropped
	lease    atomic.Int64 // unix ns until which cur may answer
	rows     int64        // rows the last scan found (sizing)
}

const (
	// dedupHeartbeat: the listener proves its session at least this often.
	dedupHeartbeat = 2 * time.Second
	// dedupLease: how long after the last proof the filter still answers (a heartbeat, a
	// ping's timeout, and room for a busy scheduler).
	dedupLease = 3 * dedupHeartbeat
	// notifyChunks: chunks per notification (base64 of 32 × 180 bytes = 7,680 characters;
	// Postgres takes at most 7,999).
	notifyChunks = 180
	// dedupListenerName is the listener session's application_name (pg_stat_activity).
	dedupListenerName = "xetcdn dedup filter"
	// DefaultDedupFilterReload is Options.DedupFilterReload's default.
	DefaultDedupFilterReload = time.Hour
)

// dedupRetry is the wait before a new listener session after one failed; a variable for tests.
var dedupRetry = time.Second

// dedupBuildRetry is the wait before another build after one failed.
const dedupBuildRetry = 10 * time.Second

func newDedupFilter(self string, reload time.Duration) *dedupFilter {
	return &dedupFilter{seed: chunkbloom.NewSeed(), self: self, reload: reload, done: make(chan struct{}),
		inflight: new(sync.WaitGroup)}
}

// dedupSender returns a new random prefix for this process's notifications. It is public
// (every listener sees it): drawn apart from the probe seed.
func dedupSender() string {
	id := chunkbloom.NewSeed()
	return strconv.FormatUint(id[0], 36) + ":"
}

// dedupChannelOf returns the notification channel of the index in schema: channels are per
// database, and indexes in different schemas of one database must not hear each other (a
// hash: a channel name is an identifier of at most 63 bytes).
func dedupChannelOf(schema string) string {
	sum := sha256.Sum256([]byte(schema))
	return "xetcdn_dedup_" + hex.EncodeToString(sum[:8])
}

// DedupAbsent implements index.DedupFilter: true when the filter proves chunk has no dedup
// entry (what DedupXorbs would answer with ErrNotFound). The first call starts the listener
// and the first build; until it completes every query reads.
func (db *DB) DedupAbsent(chunk hash.Hash) bool {
	f := db.filter
	if f == nil || db.closed.Load() {
		return false
	}
	f.start.Do(func() { go db.dedupListener() })
	b := f.cur.Load()
	if b == nil || time.Now().UnixNano() > f.lease.Load() {
		return false
	}
	return !b.Has(f.seed.Probes(&chunk))
}

// register adds the chunks of this origin's registration before it can commit; the caller
// calls done once the registration has ended (committed or failed).
func (f *dedupFilter) register(chunks []hash.Hash) (done func()) {
	if f == nil {
		return func() {}
	}
	f.mu.Lock()
	wg := f.inflight
	wg.Add(1)
	f.mu.Unlock()
	f.add(chunks)
	return wg.Done
}

// add records chunks: this origin's (register), the others' from their notifications.
func (f *dedupFilter) add(chunks []hash.Hash) {
	if f == nil || len(chunks) == 0 {
		return
	}
	f.mu.Lock()
	cur, pending := f.cur.Load(), f.pending
	f.seed.AddTo(chunks, cur, pending)
	f.mu.Unlock()
}

// drop takes the filter out of use (its session failed) and abandons a build under way.
func (f *dedupFilter) drop() {
	f.mu.Lock()
	f.cur.Store(nil)
	f.pending = nil
	f.epoch++
	f.mu.Unlock()
}

// dedupListener holds the LISTEN session, applies the other origins' notifications and keeps
// the filter built, until Close.
func (db *DB) dedupListener() {
	f := db.filter
	defer close(f.done)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-db.closing:
			cancel()
		case <-f.done:
		}
	}()
	for ctx.Err() == nil {
		err := db.listenSession(ctx)
		f.drop()
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			db.log("dedup filter: listener session ended; every query reads until it is back", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(dedupRetry):
		}
	}
}

// listenSession runs one LISTEN session: LISTEN, then a build, then notifications and
// heartbeats until the session fails or ctx ends.
func (db *DB) listenSession(ctx context.Context) error {
	f := db.filter
	cctx, cancel := context.WithTimeout(ctx, dedupLease)
	cfg := db.pool.Config().ConnConfig.Copy()
	cfg.RuntimeParams["application_name"] = dedupListenerName
	conn, err := pgx.ConnectConfig(cctx, cfg)
	cancel()
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(context.Background())
	if err := db.heartbeat(ctx, conn, "LISTEN "+db.channel); err != nil {
		return err
	}
	f.mu.Lock()
	epoch := f.epoch
	f.mu.Unlock()
	built := make(chan error, 1)
	building, failed := true, false
	go func() { built <- db.buildFilter(ctx, epoch) }()
	lastBuild := time.Now()
	for {
		wctx, cancel := context.WithTimeout(ctx, dedupHeartbeat)
		n, err := conn.WaitForNotification(wctx)
		cancel()
		switch {
		case err == nil:
			f.lease.Store(time.Now().Add(dedupLease).UnixNano())
			if err := f.apply(n.Payload); err != nil {
				db.log("dedup filter: notification ignored", err)
			}
		case ctx.Err() != nil:
			if building {
				<-built
			}
			return nil
		case errors.Is(err, context.DeadlineExceeded) && wctx.Err() != nil && !conn.IsClosed():
			// No notification within a heartbeat: prove the session (this returns every
			// notification committed before the ping).
			if err := db.heartbeat(ctx, conn, ";"); err != nil {
				if building {
					<-built
				}
				return err
			}
		default:
			if building {
				<-built
			}
			return fmt.Errorf("wait: %w", err)
		}
		if building {
			select {
			case err := <-built:
				building, failed = false, err != nil
				lastBuild = time.Now()
				if err != nil && ctx.Err() == nil {
					db.log("dedup filter: build failed; every query reads until the next", err)
				}
			default:
			}
		}
		since := time.Since(lastBuild)
		due := since >= f.reload
		if cur := f.cur.Load(); cur == nil || cur.Full() {
			due = !failed || since >= dedupBuildRetry // a failed build is not retried at once
		}
		if !building && due {
			building = true
			go func() { built <- db.buildFilter(ctx, epoch) }()
		}
	}
}

// heartbeat runs sql on the listener's connection within a heartbeat and extends the lease
// from when it was sent.
func (db *DB) heartbeat(ctx context.Context, conn *pgx.Conn, sql string) error {
	sent := time.Now()
	hctx, cancel := context.WithTimeout(ctx, dedupHeartbeat)
	defer cancel()
	if _, err := conn.Exec(hctx, sql); err != nil {
		return fmt.Errorf("%s: %w", sql, err)
	}
	db.filter.lease.Store(sent.Add(dedupLease).UnixNano())
	return nil
}

// apply adds the chunks of another origin's notification.
func (f *dedupFilter) apply(payload string) error {
	if strings.HasPrefix(payload, f.self) {
		return nil // ours: added before our commit
	}
	_, enc, ok := strings.Cut(payload, ":")
	if !ok {
		return fmt.Errorf("%w: notification without a sender", index.ErrInvalid)
	}
	raw, err := base64.StdEncoding.DecodeString(enc)
	if err != nil {
		return fmt.Errorf("%w: notification: %w", index.ErrInvalid, err)
	}
	hs, err := index.SplitHashes(raw)
	if err != nil {
		return fmt.Errorf("notification: %w", err)
	}
	f.add(hs)
	return nil
}

// buildFilter builds a filter from the dedup table and puts it in use, unless the session
// it was started for has ended.
func (db *DB) buildFilter(ctx context.Context, epoch uint64) error {
	f := db.filter
	var est int64
	if err := db.pool.QueryRow(ctx, `SELECT greatest(reltuples, 0)::bigint FROM pg_class WHERE oid = 'dedup'::regclass`).Scan(&est); err != nil {
		return fmt.Errorf("dedup filter: size: %w", translate(err))
	}
	f.mu.Lock()
	if f.epoch != epoch {
		f.mu.Unlock()
		return nil
	}
	est = max(est, f.rows)
	if cur := f.cur.Load(); cur != nil {
		est = max(est, cur.Len())
	}
	nb := chunkbloom.New(est + est/2)
	f.pending = nb
	older := f.inflight
	f.inflight = new(sync.WaitGroup)
	f.mu.Unlock()
	// This origin's registrations that may have added to no filter or the old one only end
	// before the scan's snapshot (each is bounded by Options.WriteTimeout); those after add to
	// nb. Another origin's registration committed before the snapshot is in the scan; one
	// committed after notifies after its commit, so after the session's LISTEN.
	ended := make(chan struct{})
	go func() {
		older.Wait()
		close(ended)
	}()
	select {
	case <-ended:
	case <-ctx.Done():
		return ctx.Err()
	}
	rows, err := db.pool.Query(ctx, `SELECT chunk FROM dedup`)
	if err != nil {
		return fmt.Errorf("dedup filter: scan: %w", translate(err))
	}
	defer rows.Close()
	var n int64
	var c hash.Hash
	for rows.Next() {
		v := rows.RawValues()[0]
		if len(v) != len(c) {
			continue // not a chunk hash (the column's check forbids it); no query can match it
		}
		copy(c[:], v)
		nb.Add(f.seed.Probes(&c))
		n++
	}
	if err := rows.Err(); err != nil {
		f.mu.Lock()
		if f.epoch == epoch {
			f.pending = nil
		}
		f.mu.Unlock()
		return fmt.Errorf("dedup filter: scan: %w", translate(err))
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.epoch != epoch {
		return nil
	}
	f.rows = n
	f.cur.Store(nb)
	f.pending = nil
	return nil
}

// notifyDedup announces chunks this origin has just registered to the other origins' filters
// (one statement, its transaction without a synchronous commit: losing it costs only a
// missed dedup). Best effort: a failure is logged.
// An origin without a filter of its own still announces.
func (db *DB) notifyDedup(ctx context.Context, chunks [][]byte) {
	if len(chunks) == 0 {
		return
	}
	payloads := make(textArray, 0, (len(chunks)+notifyChunks-1)/notifyChunks)
	buf := make([]byte, 0, 32*min(len(chunks), notifyChunks))
	var enc []byte
	for i := 0; i < len(chunks); i += notifyChunks {
		buf = buf[:0]
		for _, c := range chunks[i:min(i+notifyChunks, len(chunks))] {
			buf = append(buf, c...)
		}
		enc = base64.StdEncoding.AppendEncode(append(enc[:0], db.sender...), buf)
		payloads = append(payloads, string(enc))
	}
	_, err := db.pool.Exec(ctx, `SELECT set_config('synchronous_commit', 'off', true), pg_notify($2, p) FROM unnest($1::text[]) p`, payloads, db.channel)
	if err != nil {
		db.log("dedup filter: notification of a registration failed; other origins learn of it at their next rebuild", err)
	}
}

func (db *DB) log(msg string, err error) { db.logger.Warn(msg, "err", err) }
