// Command xet-edge runs a xetcdn edge: the regional read tier in front of an origin.
//
//	xet-edge --origin URL --origin-token TOKEN --data-dir DIR --listen HOST:PORT
//	         [--http-listen HOST:PORT] [--admin-listen HOST:PORT] [--permits N] [--config FILE]
//	xet-edge check-config [flags]
//	xet-edge version
//
// It serves TLS (HTTP/1.1, HTTP/2) on TCP and HTTP/3 on UDP at --listen, with a self-signed
// certificate kept in DIR unless one is configured. SIGINT or SIGTERM drain it gracefully.
// See docs/edge.md.
//
// Exit status: 0 after a graceful stop or for --help, version and a valid check-config, 2 for an
// error in the command line or configuration (each problem on its own line of stderr), 1 for any
// other failure.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/xetcdn/xetcdn/edge"
	"github.com/xetcdn/xetcdn/shared/buildinfo"
	"github.com/xetcdn/xetcdn/shared/cmdline"
)

func main() {
	args := os.Args[1:]
	if len(args) > 0 {
		switch args[0] {
		case "check-config":
			checkConfig(args[1:])
			return
		case "version", "--version", "-version":
			fmt.Println(buildinfo.Read().String("xet-edge"))
			return
		case "help":
			usage(os.Stdout)
			return
		}
	}
	if cmdline.HelpRequested(args) {
		usage(os.Stdout)
		return
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	reg := cmdline.NewRegistry()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := edge.Run(ctx, args, os.Getenv, log, reg); err != nil {
		stop()
		if errors.Is(err, edge.ErrConfig) {
			cmdline.PrintConfigError(os.Stderr, "xet-edge", err, edge.ErrConfig)
			os.Exit(2)
		}
		log.Error("xet-edge stopped", "err", err)
		os.Exit(1)
	}
}

// checkConfig runs `xet-edge check-config FLAGS`: the configuration the same flags would run
// with is loaded and validated, nothing is started. Exit status 0 (a summary on stdout) or 2.
func checkConfig(args []string) {
	if cmdline.HelpRequested(args) {
		usage(os.Stdout)
		return
	}
	summary, err := edge.CheckConfig(args, os.Getenv)
	if err != nil {
		cmdline.PrintConfigError(os.Stderr, "xet-edge", err, edge.ErrConfig)
		os.Exit(2)
	}
	fmt.Println("xet-edge: " + summary)
}

func usage(w io.Writer) {
	fmt.Fprint(w, `usage:
  xet-edge [flags]               run the edge (see docs/edge.md)
  xet-edge check-config [flags]  load and validate the configuration these flags name, start nothing
  xet-edge version               print the version, commit and Go version
  xet-edge help                  print this help

flags:
`)
	edge.PrintFlags(w)
}
