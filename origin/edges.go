package origin

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/xetcdn/xetcdn/origin/internal/config"
	"github.com/xetcdn/xetcdn/origin/internal/edgereg"
)

// openEdgeStore opens the edge registry in the database the index uses.
func openEdgeStore(ctx context.Context, cfg *config.Config) (edgereg.Store, error) {
	switch cfg.Index.Driver {
	case config.IndexSQLite:
		return edgereg.OpenSQLite(ctx, cfg.Index.SQLitePath)
	case config.IndexPostgres:
		return edgereg.OpenPostgres(ctx, cfg.Index.PostgresDSN)
	}
	return nil, fmt.Errorf("index driver %q is unknown", cfg.Index.Driver)
}

// ListEdges implements `xet-origin edges [--data-dir DIR] [--config FILE] …` (the same flags as
// the server): one line per registered edge with its state, from the registry in the index's
// database, without starting a server. It may run while the origin runs.
func ListEdges(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	cfg, err := config.Load(args, getenv)
	if err != nil {
		return err
	}
	store, err := openEdgeStore(ctx, cfg)
	if err != nil {
		return err
	}
	defer store.Close()
	g := edgereg.New(edgereg.Options{Store: store, Timeout: cfg.Regions.EdgeTimeout.D()})
	recs, err := g.List(ctx)
	if err != nil {
		return err
	}
	now := time.Now()
	tw := tabwriter.NewWriter(stdout, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "REGION\tURL\tSTATE\tLAST_SEEN\tFREE_PERMITS\tCACHE_FILL\tHIT_RATIO\tVERSION")
	for _, r := range recs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s ago\t%d/%d\t%.2f\t%.2f\t%s\n", r.Region, r.URL, g.State(r),
			now.Sub(r.Seen).Round(100*time.Millisecond), r.FreePermits, r.Permits, r.CacheFill, r.HitRatio, r.Version)
	}
	return tw.Flush()
}
