package sqlite_test

import (
	"path/filepath"
	"testing"

	"github.com/xetcdn/xetcdn/origin/internal/index"
	"github.com/xetcdn/xetcdn/origin/internal/index/indextest"
	"github.com/xetcdn/xetcdn/origin/internal/index/sqlite"
)

func open(t *testing.T) index.Index {
	t.Helper()
	db, err := sqlite.Open(t.Context(), sqlite.Options{Path: filepath.Join(t.TempDir(), "index.db")})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return db
}

func TestConformance(t *testing.T) { indextest.Run(t, open) }
