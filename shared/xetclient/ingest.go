package xetclient

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/xetcdn/xetcdn/shared/wire"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
	"github.com/xetcdn/xetcdn/shared/xet/shard"
)

// ShardError is a shard upload rejected by an NDJSON error frame of POST /v2/shards.
// Retryable ones have been retried under the retry policy before they are returned.
type ShardError struct {
	Message   string
	Retryable bool
}

func (e *ShardError) Error() string {
	return "xetclient: shard rejected: " + e.Message
}

// maxFrameLine bounds one NDJSON line, as hf_xet does (a longer line is fatal).
const maxFrameLine = 1 << 20

// maxSmallJSON bounds the small JSON answers of the upload routes.
const maxSmallJSON = 64 << 10

// postBody builds a POST request with body as its content.
func (c *Client) postBody(ctx context.Context, u string, body []byte) (*http.Request, error) {
	req, err := c.newRequest(ctx, http.MethodPost, u, true)
	if err != nil {
		return nil, err
	}
	req.Body = io.NopCloser(bytes.NewReader(body))
	req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	req.ContentLength = int64(len(body))
	req.Header.Set("Content-Type", "application/octet-stream")
	return req, nil
}

// uploadXorb sends one xorb body (chunks only, no footer) to POST /v1/xorbs/default/{h}.
// A 200 answer means the xorb is stored, whether or not it was inserted by this request.
func (c *Client) uploadXorb(ctx context.Context, base string, h hash.Hash, body []byte) error {
	u := base + "/v1/xorbs/" + DefaultPrefix + "/" + h.String()
	err := c.retry(ctx, func(ctx context.Context) error {
		req, err := c.postBody(ctx, u, body)
		if err != nil {
			return err
		}
		resp, err := c.send(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		var r wire.UploadXorbResponse
		if err := json.NewDecoder(io.LimitReader(resp.Body, maxSmallJSON)).Decode(&r); err != nil {
			return transient(fmt.Errorf("decode answer: %w", err))
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("upload xorb %s: %w", h, err)
	}
	return nil
}

// queryDedup asks GET /v1/chunks/default/{h} once, without retries. It returns nil (and no
// error) when the chunk is not tracked; any failure is returned for the caller to ignore.
func (c *Client) queryDedup(ctx context.Context, base string, h hash.Hash) (*shard.Shard, error) {
	req, err := c.newRequest(ctx, http.MethodGet, base+"/v1/chunks/"+DefaultPrefix+"/"+h.String(), true)
	if err != nil {
		return nil, err
	}
	resp, err := c.send(req)
	if err != nil {
		if isStatus(err, http.StatusNotFound) {
			return nil, nil
		}
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, shard.MaxSize+1))
	if err != nil {
		return nil, err
	}
	return shard.Parse(body)
}

// uploadShard registers a footer-less shard: POST /v2/shards, or /v1/shards after a 404/501
// on v2 (remembered for the Client's lifetime).
func (c *Client) uploadShard(ctx context.Context, base string, body []byte) error {
	if !c.v1Shards.Load() {
		err := c.retry(ctx, func(ctx context.Context) error { return c.postShardV2(ctx, base, body) })
		if !isStatus(err, http.StatusNotFound, http.StatusNotImplemented) {
			if err != nil {
				return fmt.Errorf("upload shard: %w", err)
			}
			return nil
		}
	}
	err := c.retry(ctx, func(ctx context.Context) error { return c.postShardV1(ctx, base, body) })
	if err != nil {
		return fmt.Errorf("upload shard: %w", err)
	}
	c.v1Shards.Store(true)
	return nil
}

// postShardV2 is one attempt of POST /v2/shards (see readShardStream).
func (c *Client) postShardV2(ctx context.Context, base string, body []byte) error {
	req, err := c.postBody(ctx, base+"/v2/shards", body)
	if err != nil {
		return err
	}
	resp, err := c.send(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return readShardStream(resp.Body)
}

// readShardStream reads a /v2/shards NDJSON stream to its terminal frame: nil for a result
// frame, a *ShardError for an error frame (marked transient when retryable), ErrCorrupt for a
// malformed or over-long line or a stream without a terminal frame, and a transient error when
// reading fails. Progress and heartbeat frames, and unknown types, are skipped.
func readShardStream(r io.Reader) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), maxFrameLine+1)
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var f wire.Frame
		if err := json.Unmarshal(line, &f); err != nil {
			return fmt.Errorf("%w: /v2/shards frame %q: %v", ErrCorrupt, truncate(line, 100), err)
		}
		switch f.Type {
		case wire.FrameResult:
			return nil
		case wire.FrameError:
			se := &ShardError{Message: f.Message, Retryable: f.Retryable}
			if se.Retryable {
				return transient(se)
			}
			return se
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return fmt.Errorf("%w: /v2/shards frame longer than %d bytes", ErrCorrupt, maxFrameLine)
		}
		return transient(fmt.Errorf("read /v2/shards stream: %w", err))
	}
	return fmt.Errorf("%w: /v2/shards stream ended without a result", ErrCorrupt)
}

// postShardV1 is one attempt of POST /v1/shards; the answer must be {"result":0|1}.
func (c *Client) postShardV1(ctx context.Context, base string, body []byte) error {
	req, err := c.postBody(ctx, base+"/v1/shards", body)
	if err != nil {
		return err
	}
	resp, err := c.send(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var r wire.UploadShardResponse
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxSmallJSON)).Decode(&r); err != nil {
		return transient(fmt.Errorf("decode /v1/shards answer: %w", err))
	}
	if r.Result != wire.ShardExists && r.Result != wire.ShardSyncPerformed {
		return transient(fmt.Errorf("%w: /v1/shards result %d", ErrCorrupt, r.Result))
	}
	return nil
}

func truncate(b []byte, n int) []byte {
	if len(b) > n {
		return b[:n]
	}
	return b
}
