package httpapi

import (
	"encoding/json"
	"net/http"
	"strconv"
)

// WriteJSON writes v as a JSON answer with status. Encoding errors after the header was sent
// cannot be reported to the client; v must be a value that always encodes.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error":"internal error","code":"internal"}`)
	}
	b = append(b, '\n')
	WriteRawJSON(w, status, b)
}

// WriteRawJSON writes an already encoded JSON document.
func WriteRawJSON(w http.ResponseWriter, status int, b []byte) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	_, _ = w.Write(b) // a failed write means the client left; nothing to do
}
