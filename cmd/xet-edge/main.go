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
	"fmt"
	"io"
	"os"

	"github.com/xetcdn/xetcdn/edge"
	"github.com/xetcdn/xetcdn/shared/buildinfo"
	"github.com/xetcdn/xetcdn/shared/cmdline"
)

func main() {
	args := os.Args[1:]
	if len(args) > 0 {
		switch args[0] {
		case "check-config":
			os.Exit(cmdline.CheckConfig(tier, args[1:]))
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
	os.Exit(cmdline.Serve(tier, args))
}

// tier is what shared/cmdline needs to serve and check this binary's configuration.
var tier = cmdline.Tier{Name: "xet-edge", ErrConfig: edge.ErrConfig, Run: edge.Run, Check: edge.CheckConfig, Usage: usage}

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
