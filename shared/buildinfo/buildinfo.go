// Package buildinfo reports what a binary was built from: the module version, the VCS commit and
// the Go version, for the `version` subcommands and the xet_build_info gauge.
package buildinfo

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
)

// commit is stamped by `make build` (-ldflags -X); it is used when the binary carries no VCS
// information (the Makefile builds with -buildvcs=false).
var commit string

// Unknown stands for a version or commit the binary does not know.
const Unknown = "unknown"

// Info is what a binary was built from.
type Info struct {
	Version   string // module version, "(devel)" for a build from a checkout
	Commit    string // VCS revision, Unknown when absent
	GoVersion string
}

// Read returns the build information of the running binary.
func Read() Info {
	i := Info{Version: Unknown, Commit: commit, GoVersion: runtime.Version()}
	if bi, ok := debug.ReadBuildInfo(); ok {
		if bi.Main.Version != "" {
			i.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && s.Value != "" {
				i.Commit = s.Value
			}
		}
	}
	if i.Commit == "" {
		i.Commit = Unknown
	}
	return i
}

// String formats i for a `version` subcommand: "NAME VERSION (commit C, GOVERSION)".
func (i Info) String(name string) string {
	return fmt.Sprintf("%s %s (commit %s, %s)", name, i.Version, i.Commit, i.GoVersion)
}

// Register registers the gauge xet_build_info{version,commit,go_version} = 1 on reg.
func Register(reg prometheus.Registerer) error {
	i := Read()
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "xet_build_info",
		Help:        "Build information of the running binary; always 1.",
		ConstLabels: prometheus.Labels{"version": i.Version, "commit": i.Commit, "go_version": i.GoVersion},
	})
	g.Set(1)
	return reg.Register(g)
}
