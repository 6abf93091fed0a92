// Command xet-origin runs the xetcdn origin: the authoritative Xet CAS (ingest, index, object
// store, reconstruction, tokens, internal API for edges).
//
//	xet-origin --data-dir DIR --listen HOST:PORT [--admin-listen HOST:PORT] [--config FILE]
//	xet-origin token (--data-dir DIR | --secret-file FILE) --scope REPO --access read|write|edge|admin [--ttl DURATION]
//	xet-origin delete --data-dir DIR --scope REPO (FILE_HASH... | --all)
//	xet-origin usage --data-dir DIR [REPO]
//	xet-origin gc --data-dir DIR [--dry-run] [--grace DURATION [--force]]
//	xet-origin check-config [flags]
//	xet-origin users add --data-dir DIR|--config FILE NAME
//	xet-origin tokens create --data-dir DIR|--config FILE --user NAME --grant PATTERN:read|write [--grant ...]
//	xet-origin tokens list --data-dir DIR|--config FILE [--user NAME]
//	xet-origin tokens revoke --data-dir DIR|--config FILE ID|TOKEN
//	xet-origin edges [flags]
//	xet-origin version
//
// With no configuration beyond --data-dir it runs on the embedded defaults (SQLite index and
// local-disk objects under DIR). SIGINT or SIGTERM drain it gracefully. See docs/origin.md.
//
// Exit status: 0 after a graceful stop or for --help, version and a valid check-config, 2 for an
// error in the command line or configuration (each problem on its own line of stderr), 1 for any
// other failure.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/xetcdn/xetcdn/origin"
	"github.com/xetcdn/xetcdn/shared/buildinfo"
	"github.com/xetcdn/xetcdn/shared/cmdline"
)

func main() {
	args := os.Args[1:]
	if len(args) > 0 {
		switch args[0] {
		case "token":
			if err := origin.MintToken(args[1:], os.Getenv, os.Stdout, os.Stderr); err != nil {
				if errors.Is(err, flag.ErrHelp) {
					return
				}
				fmt.Fprintln(os.Stderr, "xet-origin token:", err)
				os.Exit(2)
			}
			return
		case "delete", "usage", "gc", "edges":
			os.Exit(adminCommand(args[0], args[1:]))
		case "check-config":
			os.Exit(cmdline.CheckConfig(tier, args[1:]))
		case "users", "tokens":
			run := origin.AddUser
			if args[0] == "tokens" {
				run = origin.Tokens
			}
			if err := run(context.Background(), args[1:], os.Stdout, os.Stderr); err != nil {
				if errors.Is(err, flag.ErrHelp) {
					return
				}
				fmt.Fprintf(os.Stderr, "xet-origin %s: %v\n", args[0], err)
				os.Exit(2)
			}
			return
		case "version", "--version", "-version":
			fmt.Println(buildinfo.Read().String("xet-origin"))
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

// adminCommand runs an offline admin command (delete, usage, gc, edges; docs/origin.md) and returns
// the exit status: 0 done (or --help), 2 command line or configuration, 1 anything else.
func adminCommand(name string, args []string) int {
	run := origin.Delete
	switch name {
	case "usage":
		run = origin.Usage
	case "gc":
		run = origin.GC
	case "edges":
		run = func(ctx context.Context, args []string, getenv func(string) string, stdout, _ io.Writer) error {
			return origin.ListEdges(ctx, args, getenv, stdout)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, args, os.Getenv, os.Stdout, os.Stderr)
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, origin.ErrConfig):
		cmdline.PrintConfigError(os.Stderr, "xet-origin "+name, err, origin.ErrConfig)
		return 2
	default:
		fmt.Fprintf(os.Stderr, "xet-origin %s: %v\n", name, err)
		return 1
	}
}

// tier is what shared/cmdline needs to serve and check this binary's configuration.
var tier = cmdline.Tier{Name: "xet-origin", ErrConfig: origin.ErrConfig, Run: origin.Run, Check: origin.CheckConfig, Usage: usage}

func usage(w io.Writer) {
	fmt.Fprint(w, `usage:
  xet-origin [flags]              run the origin (see docs/origin.md)
  xet-origin token [token flags]  mint a token signed with the origin's key ('xet-origin token -h')
  xet-origin delete [flags] --scope REPO (FILE... | --all)
                                  delete files or a whole repository ('xet-origin delete -h')
  xet-origin usage [flags] [REPO] storage usage per repository and totals, as JSON
  xet-origin gc [flags] [--dry-run] [--grace D [--force]]
                                  delete what no visible file references ('xet-origin gc -h')
  xet-origin check-config [flags] load and validate the configuration these flags name, start nothing
  xet-origin users add --data-dir DIR|--config FILE NAME
                                  add a user of the Hub API (docs/hub.md)
  xet-origin tokens create --data-dir DIR|--config FILE --user NAME --grant PATTERN:read|write [--grant ...]
                                  print a new hf_ access token for a user
  xet-origin tokens list --data-dir DIR|--config FILE [--user NAME]
                                  list the hf_ tokens (id, user, created, grants; never the token)
  xet-origin tokens revoke --data-dir DIR|--config FILE ID|TOKEN
                                  revoke a token at once
  xet-origin edges [flags]        list the edges registered in the index these flags name, with their state
  xet-origin version              print the version, commit and Go version
  xet-origin help                 print this help

flags:
`)
	origin.PrintFlags(w)
	fmt.Fprintf(w, "\nsecrets come from the environment: %s, %s, %s\n",
		"XETCDN_POSTGRES_DSN", "XETCDN_S3_ACCESS_KEY", "XETCDN_S3_SECRET_KEY")
}
