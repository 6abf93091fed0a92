package origin

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// Tokens implements `xet-origin tokens create|list|revoke` (docs/hub.md, "Admin commands").
func Tokens(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 {
		switch args[0] {
		case "list":
			return ListTokens(ctx, args, stdout, stderr)
		case "revoke":
			return RevokeToken(ctx, args, stdout, stderr)
		}
	}
	if len(args) == 0 || args[0] != "create" {
		fmt.Fprintln(stderr, "usage: xet-origin tokens create|list|revoke --data-dir DIR|--config FILE ...")
		return errors.New("the tokens subcommands are create, list and revoke")
	}
	return CreateToken(ctx, args, stdout, stderr)
}

// ListTokens implements `xet-origin tokens list --data-dir DIR|--config FILE [--user NAME]`:
// one line per token (id, user, created, grants), never the token itself.
func ListTokens(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	const usage = "xet-origin tokens list --data-dir DIR|--config FILE [--user NAME]"
	fs := flag.NewFlagSet("xet-origin tokens list", flag.ContinueOnError)
	user := fs.String("user", "", "only this user's tokens")
	cfg, err := adminConfig(fs, args[1:], stdout, stderr, usage)
	if err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	st, err := openHubStore(ctx, cfg)
	if err != nil {
		return err
	}
	defer st.Close()
	list, err := st.Tokens(ctx, *user)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tUSER\tCREATED\tGRANTS")
	for _, t := range list {
		grants := make([]string, len(t.Grants))
		for i, g := range t.Grants {
			grants[i] = g.String()
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", t.ID, t.User, t.Created.Format(time.RFC3339), strings.Join(grants, " "))
	}
	return tw.Flush()
}

// RevokeToken implements `xet-origin tokens revoke --data-dir DIR|--config FILE ID|TOKEN`: the
// token is refused from the next request on (docs/hub.md).
func RevokeToken(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	const usage = "xet-origin tokens revoke --data-dir DIR|--config FILE ID|TOKEN"
	fs := flag.NewFlagSet("xet-origin tokens revoke", flag.ContinueOnError)
	cfg, err := adminConfig(fs, args[1:], stdout, stderr, usage)
	if err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return errors.New("exactly one token ID (from 'tokens list') or hf_ token is expected")
	}
	st, err := openHubStore(ctx, cfg)
	if err != nil {
		return err
	}
	defer st.Close()
	return st.RevokeToken(ctx, fs.Arg(0))
}
