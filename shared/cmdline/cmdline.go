// Package cmdline holds what the server binaries (cmd/xet-origin, cmd/xet-edge) do alike around
// their tier's Run: recognising a help request, the process's metrics registry, printing
// configuration errors one problem per line, serving until a signal, and check-config.
package cmdline

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/xetcdn/xetcdn/shared/buildinfo"
)

// HelpRequested reports whether the flags ask for help (-h, -help, --help), as the flag package
// would see them: up to "--".
func HelpRequested(args []string) bool {
	for _, a := range args {
		switch a {
		case "-h", "-help", "--help", "-h=true", "-help=true", "--help=true":
			return true
		case "--":
			return false
		}
	}
	return false
}

// NewRegistry returns a registry with the Go runtime, process and build-info
// (xet_build_info) collectors.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if err := buildinfo.Register(reg); err != nil {
		panic(err) // a fresh registry: cannot clash
	}
	return reg
}

// PrintConfigError writes err, a configuration error wrapping sentinel (several joined with
// errors.Join, one per line), to w as "NAME: configuration error:" and one indented problem per
// line without the sentinel's prefix, then where to find the usage.
func PrintConfigError(w io.Writer, name string, err, sentinel error) {
	fmt.Fprintf(w, "%s: configuration error:\n", name)
	for _, line := range strings.Split(err.Error(), "\n") {
		fmt.Fprintln(w, "  "+strings.TrimPrefix(line, sentinel.Error()+": "))
	}
	fmt.Fprintf(w, "run '%s --help' for usage\n", name)
}

// Tier names a server binary and its tier's entry points, for Serve and CheckConfig.
type Tier struct {
	Name      string // the binary: "xet-origin", "xet-edge"
	ErrConfig error  // the tier's configuration-error sentinel (exit status 2)
	// Run serves until ctx is cancelled (SIGINT, SIGTERM) and the tier has drained.
	Run func(ctx context.Context, args []string, getenv func(string) string, log *slog.Logger, reg *prometheus.Registry) error
	// Check loads and validates the configuration args name and returns a one-line summary.
	Check func(args []string, getenv func(string) string) (string, error)
	Usage func(io.Writer)
}

// Serve runs the tier with a JSON logger on stderr and NewRegistry's registry until SIGINT or
// SIGTERM, and returns the exit status: 0 after a clean drain, 2 for a configuration error
// (printed by PrintConfigError), 1 for any other failure (logged).
func Serve(t Tier, args []string) int {
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := t.Run(ctx, args, os.Getenv, log, NewRegistry())
	stop()
	switch {
	case err == nil:
		return 0
	case errors.Is(err, t.ErrConfig):
		PrintConfigError(os.Stderr, t.Name, err, t.ErrConfig)
		return 2
	default:
		log.Error(t.Name+" stopped", "err", err)
		return 1
	}
}

// CheckConfig runs `NAME check-config FLAGS`: the configuration the same flags would run with
// is loaded and validated, nothing is started. It returns the exit status: 0 (the summary, or
// the usage for a help request, on stdout) or 2 (the problems on stderr).
func CheckConfig(t Tier, args []string) int {
	if HelpRequested(args) {
		t.Usage(os.Stdout)
		return 0
	}
	summary, err := t.Check(args, os.Getenv)
	if err != nil {
		PrintConfigError(os.Stderr, t.Name, err, t.ErrConfig)
		return 2
	}
	fmt.Println(t.Name + ": " + summary)
	return 0
}
