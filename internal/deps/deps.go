//go:build deps

// Package deps pins the chosen dependencies in go.mod until real code imports them all.
package deps
import (
	_ "github.com/quic-go/quic-go/http3"
	_ "github.com/dgraph-io/ristretto/v2"
	_ "github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/minio/minio-go/v7"
	_ "github.com/pierrec/lz4/v4"
	_ "modernc.org/sqlite"
	_ "github.com/golang-jwt/jwt/v5"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "golang.org/x/sync/errgroup"
	_ "github.com/zeebo/blake3"
)
