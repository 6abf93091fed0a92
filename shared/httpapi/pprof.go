package httpapi

import (
	"net/http"
	"net/http/pprof"
)

// Pprof serves /debug/pprof/ and its profiles. It checks nothing: the origin's and the edge's
// admin handlers put it behind an admin token.
func Pprof() http.Handler {
	m := http.NewServeMux()
	m.HandleFunc("/debug/pprof/", pprof.Index)
	m.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	m.HandleFunc("/debug/pprof/profile", pprof.Profile)
	m.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	m.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return m
}
