// Package configfile holds what the binaries' typed configurations share: a Duration that reads
// and writes Go duration strings, strict decoding of a JSON configuration file, and the
// defaults → file → flags overlay (Load).
package configfile

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"time"
)

// Duration is a time.Duration written as a Go duration string ("20s") in JSON.
type Duration time.Duration

// D returns d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// MarshalText implements encoding.TextMarshaler.
func (d Duration) MarshalText() ([]byte, error) { return []byte(time.Duration(d).String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// Decode reads the JSON file at path into v, which holds the defaults beforehand: keys the file
// names overwrite them, keys it does not name keep them. An unknown key is an error, so a typo
// never silently falls back to a default. Errors name the file.
func Decode(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%s: %v", path, err)
	}
	return nil
}

// Flags defines a binary's command-line flags on fs, bound to file (the --config flag) and to
// the fields of f.
type Flags[T any] func(fs *flag.FlagSet, file *string, f *T)

// Load builds a configuration in c, which holds the defaults beforehand: the JSON file args
// name with --config (Decode), then exactly the flags args give, which win over the file. Flags
// args do not give keep the file's or the default's value, whatever default their definition
// shows in --help. Errors wrap invalid. The environment is the caller's to apply.
func Load[T any](name string, c *T, args []string, define Flags[T], invalid error) error {
	// First pass: the file's name (every flag must be known to parse the others).
	var file string
	var scratch T
	fs := newSet(name)
	define(fs, &file, &scratch)
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%w: %v", invalid, err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected arguments %q", invalid, fs.Args())
	}
	if file != "" {
		if err := Decode(file, c); err != nil {
			return fmt.Errorf("%w: %v", invalid, err)
		}
	}
	// Second pass: the flags bound to c itself. Defining a flag writes its default into the
	// field, so c is restored after the definitions; parsing then sets only the flags given.
	kept := *c
	fs = newSet(name)
	define(fs, &file, c)
	*c = kept
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%w: %v", invalid, err)
	}
	return nil
}

// PrintFlags writes the descriptions and defaults of the flags define makes to w (for --help).
func PrintFlags[T any](name string, w io.Writer, define Flags[T]) {
	var file string
	var f T
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	define(fs, &file, &f)
	fs.SetOutput(w)
	fs.PrintDefaults()
}

func newSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // the error says what is wrong; --help is handled by the command
	return fs
}
