package server

import "testing"

// backends lists the backends the API tests run on.
func backends(t *testing.T) []backend {
	return []backend{sqliteLocal()}
}
