// Command xet-edge runs a xetcdn edge: the regional read tier in front of an origin.
//
//	xet-edge --origin URL --origin-token TOKEN --data-dir DIR --listen HOST:PORT
//	         [--http-listen HOST:PORT] [--admin-listen HOST:PORT] [--permits N] [--config FILE]
//
// It serves TLS (HTTP/1.1, HTTP/2) on TCP and HTTP/3 on UDP at --listen, with a self-signed
// certificate kept in DIR unless one is configured. SIGINT or SIGTERM drain it gracefully.
// See docs/edge.md.
package main

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/xetcdn/xetcdn/edge"
)

func main() {
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := edge.Run(ctx, os.Args[1:], os.Getenv, log, reg); err != nil {
		log.Error("xet-edge stopped", "err", err)
		stop()
		os.Exit(1)
	}
}
