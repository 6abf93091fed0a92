// Package jsontest decodes JSON for the tests that compare the project's hand-written JSON
// encoders with encoding/json.
package jsontest

import (
	"bytes"
	"encoding/json"
	"testing"
)

// Value decodes b as exactly one JSON document: numbers as json.Number (so every digit
// counts), trailing data refused. A document that does not decode fails the test.
func Value(t testing.TB, b []byte) any {
	t.Helper()
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		t.Fatalf("does not decode: %v\n%.400s", err, b)
	}
	if d.More() {
		t.Fatalf("trailing data after the document\n%.400s", b)
	}
	return v
}
