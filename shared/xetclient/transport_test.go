package xetclient

import (
	"errors"
	"net/http"
	"testing"
)

type namedRT struct {
	name string
	got  *[]string
}

var errRouted = errors.New("routed")

func (n namedRT) RoundTrip(*http.Request) (*http.Response, error) {
	*n.got = append(*n.got, n.name)
	return nil, errRouted
}

// With HTTP/3 chosen, https goes over QUIC and plain http (an edge's plain listener, a TLS-
// terminating load balancer's transfer URLs) over TCP: QUIC cannot carry plain HTTP.
func TestH3OrPlainRoutesByScheme(t *testing.T) {
	var got []string
	rt := h3OrPlain{h3: namedRT{"h3", &got}, plain: namedRT{"plain", &got}}
	for _, u := range []string{"https://edge:8443/v2/reconstructions/x", "http://edge:8081/v1/transfer/xorbs/default/x"} {
		req, err := http.NewRequest(http.MethodGet, u, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := rt.RoundTrip(req); !errors.Is(err, errRouted) {
			t.Fatalf("RoundTrip(%s) = %v", u, err)
		}
	}
	if len(got) != 2 || got[0] != "h3" || got[1] != "plain" {
		t.Fatalf("routed to %v, want [h3 plain]", got)
	}
}
