// Command linkemu joins network namespaces through a user-space link emulator (perf/linkemu):
// one TUN device "emu0" per namespace, IP packets forwarded between them with the configured
// delay, jitter, loss and rate per path. perf/regions.sh runs it; see perf/README.md.
//
//	linkemu -config links.json [-stats stats.json]
//
// It prints "linkemu: ready" on standard output once every device is up, forwards until
// SIGINT/SIGTERM, and then writes the per-path counters (packets, bytes, lost, queue drops) as
// JSON to -stats (also on SIGUSR1). Exit status 2 for a bad configuration, 1 when a device
// cannot be set up or fails.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/xetcdn/xetcdn/perf/linkemu"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("linkemu", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfgPath := fs.String("config", "", "JSON configuration (required; see perf/linkemu.Config)")
	statsPath := fs.String("stats", "", "write the per-path counters here as JSON on exit and on SIGUSR1")
	ifname := fs.String("dev", "emu0", "name of the TUN device in each namespace")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *cfgPath == "" || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "usage: linkemu -config FILE [-stats FILE] [-dev NAME]")
		return 2
	}
	b, err := os.ReadFile(*cfgPath)
	if err != nil {
		fmt.Fprintf(stderr, "linkemu: %v\n", err)
		return 2
	}
	cfg, err := linkemu.ParseConfig(b)
	if err != nil {
		fmt.Fprintf(stderr, "%v\n", err)
		return 2
	}
	ports := make([]linkemu.Port, 0, len(cfg.Nodes))
	defer func() {
		for _, p := range ports {
			p.Close()
		}
	}()
	for i := range cfg.Nodes {
		n := &cfg.Nodes[i]
		f, err := linkemu.OpenTUN(n.Netns, *ifname, n.Address().String(), cfg.Prefix, cfg.MTU)
		if err != nil {
			fmt.Fprintf(stderr, "linkemu: node %s: %v\n", n.Name, err)
			return 1
		}
		ports = append(ports, f)
	}
	r, err := linkemu.NewRouter(cfg, ports)
	if err != nil {
		fmt.Fprintf(stderr, "%v\n", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	usr1 := make(chan os.Signal, 1)
	signal.Notify(usr1, syscall.SIGUSR1)
	go func() {
		for range usr1 {
			writeStats(*statsPath, r.Stats(), stderr)
		}
	}()
	fmt.Fprintln(stdout, "linkemu: ready")
	err = r.Run(ctx)
	ports = nil // Run closed them
	writeStats(*statsPath, r.Stats(), stderr)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	return 0
}

func writeStats(path string, s linkemu.Stats, stderr io.Writer) {
	if path == "" {
		return
	}
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false) // path names are "from>to"
	enc.SetIndent("", "  ")
	_ = enc.Encode(s)
	if err := os.WriteFile(path+".tmp", []byte(b.String()), 0o644); err == nil {
		err = os.Rename(path+".tmp", path)
		if err != nil {
			fmt.Fprintf(stderr, "linkemu: stats: %v\n", err)
		}
	} else {
		fmt.Fprintf(stderr, "linkemu: stats: %v\n", err)
	}
}
