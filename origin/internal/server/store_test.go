package server

import (
	"context"
	"errors"
	"testing"

	"github.com/xetcdn/xetcdn/origin/internal/objstore"
)

// openLocalStore opens the real local-disk object store in dir.
func openLocalStore(t testing.TB, dir string) objstore.ObjectStore {
	l, err := objstore.NewLocal(dir)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// stored reports whether the object store of e holds key.
func (e *env) stored(key string) bool {
	e.t.Helper()
	_, err := e.objs.Stat(context.Background(), key)
	if err != nil && !errors.Is(err, objstore.ErrNotFound) {
		e.t.Fatal(err)
	}
	return err == nil
}
