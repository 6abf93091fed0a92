package originapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/xetcdn/xetcdn/shared/internalapi"
)

// ErrRejected: the origin refused an edge report (4xx); the error carries its answer.
// ErrNoRegistry: the origin has no edge registry (404).
var (
	ErrRejected   = errors.New("origin: report rejected")
	ErrNoRegistry = errors.New("origin: no edge registry")
)

// ReportEdge sends one heartbeat of the edge registry (POST /internal/v1/edges) and returns
// the origin's answer (when to send the next).
func (c *Client) ReportEdge(ctx context.Context, rep internalapi.EdgeReport) (internalapi.EdgeAck, error) {
	const call = "edge_report"
	var ack internalapi.EdgeAck
	body, err := json.Marshal(rep)
	if err != nil {
		return ack, err
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base.String()+internalapi.EdgesPath, bytes.NewReader(body))
	if err != nil {
		return ack, fmt.Errorf("originapi: %w", err)
	}
	req.Header.Set("Authorization", c.auth)
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	resp, err := c.hc.Do(req)
	c.m.duration.WithLabelValues(call).Observe(time.Since(start).Seconds())
	if err != nil {
		c.m.requests.WithLabelValues(call, "error").Inc()
		return ack, c.classify(ctx, call, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		c.m.requests.WithLabelValues(call, "404").Inc()
		return ack, ErrNoRegistry
	}
	c.m.requests.WithLabelValues(call, strconv.Itoa(resp.StatusCode)).Inc()
	b, err := readAll(resp.Body, 64<<10)
	if err != nil {
		return ack, c.classify(ctx, call, err)
	}
	switch {
	case resp.StatusCode/100 == 4:
		c.m.errors.WithLabelValues(call, "status").Inc()
		return ack, fmt.Errorf("%w: status %d: %s", ErrRejected, resp.StatusCode, bytes.TrimSpace(b))
	case resp.StatusCode/100 != 2:
		c.m.errors.WithLabelValues(call, "status").Inc()
		return ack, fmt.Errorf("%w: POST %s: status %d", ErrUnavailable, internalapi.EdgesPath, resp.StatusCode)
	}
	if err := json.Unmarshal(b, &ack); err != nil {
		c.m.errors.WithLabelValues(call, "protocol").Inc()
		return ack, fmt.Errorf("%w: POST %s: %v", ErrUnavailable, internalapi.EdgesPath, err)
	}
	return ack, nil
}
