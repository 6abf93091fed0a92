// Command xet is the xetcdn client and tools CLI.
//
//	xet hash FILE...            chunks and hashes files locally, one JSON line per file
//	xet upload [flags] FILE...  uploads files to a CAS
//	xet download [flags]        downloads a file by its hash
//	xet version                 prints the version
//
// Every subcommand writes its results to stdout and diagnostics to stderr; any error makes the
// process exit with status 1.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"syscall"

	"github.com/quic-go/quic-go"

	"github.com/xetcdn/xetcdn/shared/buildinfo"
	"github.com/xetcdn/xetcdn/shared/xetclient"
)

// command is one subcommand. run gets the arguments after the subcommand's name; it writes
// results to stdout and progress or diagnostics to stderr, and returns an error instead of
// exiting. It must stop early when ctx is cancelled (SIGINT/SIGTERM).
type command struct {
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
	summary string
}

// commands is the dispatch table. Each subcommand lives in its own file (hash.go, upload.go,
// download.go); adding one means one line here.
func commands() map[string]command {
	return map[string]command{
		"hash":     {runHash, "print size, SHA-256, file hash and chunks of files as JSON lines"},
		"upload":   {runUpload, "upload files to a CAS endpoint"},
		"download": {runDownload, "download a file by its file hash"},
		"version":  {runVersion, "print the version"},
	}
}

// errUsage marks an error in the command line; run prints the usage after it.
var errUsage = errors.New("usage")

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run dispatches args to a subcommand and returns the process exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cmds := commands()
	if len(args) == 0 {
		usage(stderr, cmds)
		return 1
	}
	name := args[0]
	if name == "--version" || name == "-version" {
		name = "version"
	}
	if name == "help" || name == "-h" || name == "--help" || name == "-help" {
		usage(stdout, cmds)
		return 0
	}
	cmd, ok := cmds[name]
	if !ok {
		fmt.Fprintf(stderr, "xet: unknown command %q\n", name)
		usage(stderr, cmds)
		return 1
	}
	if err := cmd.run(ctx, args[1:], stdout, stderr); err != nil {
		fmt.Fprintf(stderr, "xet %s: %v\n", name, err)
		if h := hint(err); h != "" {
			fmt.Fprintln(stderr, h)
		}
		if errors.Is(err, errUsage) {
			fmt.Fprintf(stderr, "run 'xet %s -h' for usage\n", name)
		}
		return 1
	}
	return 0
}

func usage(w io.Writer, cmds map[string]command) {
	fmt.Fprintln(w, "usage: xet <command> [arguments]")
	fmt.Fprintln(w, "\ncommands:")
	names := make([]string, 0, len(cmds))
	for n := range cmds {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-9s %s\n", n, cmds[n].summary)
	}
}

// runVersion prints the module version, the VCS commit the binary was built from and the Go
// version.
func runVersion(_ context.Context, args []string, stdout, _ io.Writer) error {
	if len(args) != 0 {
		return fmt.Errorf("%w: version takes no arguments", errUsage)
	}
	_, err := fmt.Fprintln(stdout, buildinfo.Read().String("xet"))
	return err
}

// hint says what to do about a connection error the message alone does not explain.
func hint(err error) string {
	var qt *quic.IdleTimeoutError
	var ht *quic.HandshakeTimeoutError
	switch {
	case xetclient.IsCertificateError(err):
		return "the server's TLS certificate is not trusted: pass --ca-file PEM (for an edge with its own " +
			"certificate: DATA-DIR/tls/cert.pem), or set SSL_CERT_FILE to that file, or use the edge's plain " +
			"HTTP listener (--http-listen) with an http:// endpoint; --insecure turns verification off"
	case errors.As(err, &qt) || errors.As(err, &ht):
		return fmt.Sprintf("no HTTP/3 (QUIC over UDP) answer within %v: is the server's UDP port reachable? "+
			"Without --http3 the client uses TCP", xetclient.QUICHandshakeTimeout)
	}
	return ""
}
