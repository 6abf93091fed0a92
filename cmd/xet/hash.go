package main

import (
	"bufio"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/xetcdn/xetcdn/shared/xet/chunk"
	"github.com/xetcdn/xetcdn/shared/xet/hash"
)

// hashOutput is the JSON line `xet hash` prints per file. Field order is part of the output
// format: size, sha256, file_hash, chunks.
type hashOutput struct {
	Size     int64       `json:"size"`
	SHA256   string      `json:"sha256"`    // ordinary lowercase hex of the digest
	FileHash hash.Hash   `json:"file_hash"` // protocol string form
	Chunks   []chunkJSON `json:"chunks"`    // never null: [] for an empty file
}

type chunkJSON struct {
	Hash   hash.Hash `json:"hash"`
	Length int       `json:"length"`
}

// runHash implements `xet hash FILE...`: for each file, in order, one JSON object on one line.
// "-" reads standard input. The file is streamed: memory is a fixed buffer plus 40 bytes per
// chunk (the chunk list is part of the output).
func runHash(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("hash", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: xet hash FILE...   (\"-\" reads standard input)")
		fmt.Fprintln(stderr, `prints {"size":N,"sha256":"…","file_hash":"…","chunks":[{"hash":"…","length":N},…]} per file`)
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if fs.NArg() == 0 {
		return fmt.Errorf("%w: no file given", errUsage)
	}
	out := bufio.NewWriterSize(stdout, 64<<10)
	for _, name := range fs.Args() {
		if err := ctx.Err(); err != nil {
			return err
		}
		line, err := hashFile(ctx, name)
		if err != nil {
			return err
		}
		if _, err := out.Write(line); err != nil {
			return err
		}
		// Flush per file, so a caller streaming many files sees each line as soon as it is ready.
		if err := out.Flush(); err != nil {
			return err
		}
	}
	return nil
}

// hashFile returns the JSON line (with its newline) for the named file.
func hashFile(ctx context.Context, name string) ([]byte, error) {
	var r io.Reader = os.Stdin
	if name != "-" {
		f, err := os.Open(name)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		r = f
	}
	chunks, info, err := chunk.HashAll(ctxReader{ctx, r})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	o := hashOutput{
		Size:     info.Size,
		SHA256:   hex.EncodeToString(info.SHA256[:]),
		FileHash: info.FileHash,
		Chunks:   make([]chunkJSON, len(chunks)),
	}
	for i, c := range chunks {
		o.Chunks[i] = chunkJSON{Hash: c.Hash, Length: c.Len}
	}
	line, err := json.Marshal(o)
	if err != nil {
		return nil, err
	}
	return append(line, '\n'), nil
}

// ctxReader stops reading once ctx is done, so SIGINT interrupts hashing a large file.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
