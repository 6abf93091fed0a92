package main

import (
	"context"
	"io"
)

// runUpload implements `xet upload`. This is a placeholder: the client engineer replaces this
// file with the real command.
func runUpload(_ context.Context, _ []string, _, _ io.Writer) error {
	return errNotImplemented
}
