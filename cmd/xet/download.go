package main

import (
	"context"
	"io"
)

// runDownload implements `xet download`. This is a placeholder: the client engineer replaces
// this file with the real command.
func runDownload(_ context.Context, _ []string, _, _ io.Writer) error {
	return errNotImplemented
}
