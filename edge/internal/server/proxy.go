package server

import (
	"fmt"
	"net/http"
	"net/http/httputil"

	"github.com/xetcdn/xetcdn/edge/internal/originapi"
	"github.com/xetcdn/xetcdn/shared/httpapi"
)

// newProxy streams requests to the origin: bodies in both directions are copied as they come
// (FlushInterval -1, so /v2/shards NDJSON frames and heartbeats reach the client at once), the
// client's own Authorization goes through (the origin checks it), and the request id is kept.
func (s *Server) newProxy() *httputil.ReverseProxy {
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(s.o.Origin)
			pr.Out.Host = s.o.Origin.Host
			pr.SetXForwarded()
			if id := httpapi.RequestID(pr.In.Context()); id != "" {
				pr.Out.Header.Set(httpapi.RequestIDHeader, id)
			}
		},
		Transport:     s.o.Transport,
		FlushInterval: -1,
		ModifyResponse: func(resp *http.Response) error {
			// The edge already set the same id on its answer; avoid a duplicate header.
			resp.Header.Del(httpapi.RequestIDHeader)
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if r.Context().Err() != nil {
				return // the client left
			}
			s.errs.Write(w, r, fmt.Errorf("%w: proxy %s %s: %w", originapi.ErrUnavailable, r.Method, r.URL.Path, err))
		},
		ErrorLog: nil,
	}
}

// forward proxies r to the origin unchanged. The request body stays readable after the answer's
// header is flushed (full duplex): otherwise an HTTP/1.1 server may close it as soon as the
// proxy flushes the origin's header, while the transport is still reading its end (EOF) to
// finish the request, and the transport then drops the origin connection mid-answer (seen as
// "use of closed network connection" on /v2/shards streams through the edge).
func (s *Server) forward(w http.ResponseWriter, r *http.Request) error {
	_ = http.NewResponseController(w).EnableFullDuplex() // HTTP/2 and HTTP/3 are full duplex already
	s.proxy.ServeHTTP(w, r)
	return nil
}
