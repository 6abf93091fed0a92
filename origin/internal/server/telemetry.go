package server

import (
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/xetcdn/xetcdn/shared/httpapi"
)

// maxTelemetryBody is the largest telemetry post accepted (docs/protocol.md §2.8).
const maxTelemetryBody = 1 << 20

// telemetryEvent is the envelope; metrics are accepted but not kept.
type telemetryEvent struct {
	Time       string          `json:"time"`
	Event      string          `json:"event"`
	SessionID  string          `json:"session_id"`
	UserAgent  *string         `json:"user_agent"`
	UserAgent2 *string         `json:"userAgent"`
	Metrics    json.RawMessage `json:"metrics"`
}

// knownEvents bounds the label values of the telemetry counter.
var knownEvents = map[string]bool{
	"xet_upload_summary": true, "xet_download_summary": true, "xet_transfer_heartbeat": true,
}

// telemetry: POST /v1/telemetry — checked (JSON object with an event name), counted, dropped.
func (s *Server) telemetry(w http.ResponseWriter, r *http.Request) error {
	body, err := httpapi.ReadBody(w, r, httpapi.BodyOptions{Limit: maxTelemetryBody, Pace: httpapi.PaceOptions{
		Floor: s.cfg.Limits.PaceFloor, Window: s.cfg.Limits.PaceWindow.D()}})
	if err != nil {
		return err
	}
	var ev telemetryEvent
	if err := json.Unmarshal(body, &ev); err != nil {
		return fmt.Errorf("%w: telemetry: %v", httpapi.ErrBadRequest, err)
	}
	if ev.Event == "" {
		return fmt.Errorf("%w: telemetry: no event", httpapi.ErrBadRequest)
	}
	if ev.UserAgent != nil && ev.UserAgent2 != nil {
		return fmt.Errorf("%w: telemetry: both user_agent and userAgent", httpapi.ErrBadRequest)
	}
	label := ev.Event
	if !knownEvents[label] {
		label = "other"
	}
	s.m.telemetry.WithLabelValues(label).Inc()
	httpapi.WriteJSON(w, http.StatusOK, struct{}{})
	return nil
}
