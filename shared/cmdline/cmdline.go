// Package cmdline holds what the server binaries (cmd/xet-origin, cmd/xet-edge) do alike around
// their tier's Run: recognising a help request, the process's metrics registry, and printing
// configuration errors one problem per line.
package cmdline

import (
	"fmt"
	"io"
	"strings"

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
