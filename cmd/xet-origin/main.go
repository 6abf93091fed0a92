// Command xet-origin runs the xetcdn origin: the authoritative Xet CAS (ingest, index, object
// store, reconstruction, tokens, internal API for edges).
//
//	xet-origin --data-dir DIR --listen HOST:PORT [--admin-listen HOST:PORT] [--config FILE]
//	xet-origin token --data-dir DIR --scope REPO --access read|write|edge|admin [--ttl DURATION]
//
// With no configuration beyond --data-dir it runs on the embedded defaults (SQLite index and
// local-disk objects under DIR). SIGINT or SIGTERM drain it gracefully. See docs/origin.md.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/xetcdn/xetcdn/origin"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "token" {
		if err := origin.MintToken(os.Args[2:], os.Stdout, os.Stderr); err != nil {
			fmt.Fprintln(os.Stderr, "xet-origin token:", err)
			os.Exit(2)
		}
		return
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := origin.Run(ctx, os.Args[1:], os.Getenv, log, reg); err != nil {
		log.Error("xet-origin stopped", "err", err)
		stop()
		os.Exit(1)
	}
}
