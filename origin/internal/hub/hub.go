// Package hub is the small part of the Hugging Face Hub API that the stock huggingface_hub
// flows call (docs/hub.md): repositories (models and datasets, "namespace/name"), branches and
// tags, immutable commits, the file tree at a revision, resolve (HEAD/GET of a file), the
// pre-upload check and the NDJSON commit, users and their hf_ access tokens.
//
// Large files are Xet files: their bytes go through the CAS routes (hf_xet), and a commit names
// them by the sha256 the uploaded shard recorded (Store.PutLFS, fed by ingest's Registered hook).
// Small files (at most Options.InlineMax bytes) travel base64 inside the commit and are stored
// as regular objects under BlobKey. The state lives in its own tables (Store), in the same
// database as the CAS index:
//
//	hub_users    name PK
//	hub_tokens   hash PK ── user, grants (JSON)          hf_ tokens, stored as sha256(token)
//	hub_repos    scope PK ── private, created            scope = "models/ns/name" | "datasets/ns/name"
//	hub_refs     (scope, kind, name) PK ── commit        kind = branch | tag
//	hub_commits  (scope, id) PK ── parent, message, author, at, tree (JSON)
//	hub_lfs      (scope, sha256) PK ── file, size        sha256 → Xet file hash, per scope
//
// A commit is one transaction: the commit row and the branch head moved from the expected parent
// (compare-and-swap), so a stale parent is refused (412) and a refused commit leaves nothing.
package hub

import (
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// Errors returned by this package wrap one of these sentinels; the HTTP layer maps them to the
// Hub's error shape (errors.go).
var (
	ErrRepoNotFound     = errors.New("repository not found")
	ErrRevisionNotFound = errors.New("revision not found")
	ErrEntryNotFound    = errors.New("entry not found")
	ErrExists           = errors.New("already exists")
	ErrConflict         = errors.New("a commit has happened since; refresh and try again")
	ErrInvalid          = errors.New("invalid request")
	ErrTooLarge         = errors.New("too large")
	ErrUnauthorized     = errors.New("invalid credentials")
	ErrForbidden        = errors.New("forbidden")
	ErrUnavailable      = errors.New("hub store unavailable")
)

// Repository types and the URL/scope prefix of each.
const (
	Model   = "model"
	Dataset = "dataset"
)

// Plural is the scope and /api prefix of a repository type ("models", "datasets"); "" for an
// unknown type.
func Plural(typ string) string {
	switch typ {
	case Model:
		return "models"
	case Dataset:
		return "datasets"
	}
	return ""
}

// TypeOfPlural is the inverse of Plural; "" for anything else.
func TypeOfPlural(p string) string {
	switch p {
	case "models":
		return Model
	case "datasets":
		return Dataset
	}
	return ""
}

// Repo is a repository.
type Repo struct {
	Type    string // Model | Dataset
	ID      string // "namespace/name"
	Private bool
	Created time.Time
}

// Scope is the repository's scope: the CAS scope its Xet files are registered under and the
// scope of the tokens the token route mints for it ("models/acme/llama").
func (r Repo) Scope() string { return Plural(r.Type) + "/" + r.ID }

var partRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,95}$`)

// CheckRepoID validates "namespace/name": two parts of letters, digits, '.', '_', '-', each
// starting with a letter or digit, at most 96 characters, no "--" or "..", not ending in
// ".git".
func CheckRepoID(id string) error {
	ns, name, ok := strings.Cut(id, "/")
	if !ok || strings.Contains(name, "/") {
		return fmt.Errorf("%w: repository id %q is not namespace/name", ErrInvalid, id)
	}
	for _, p := range []string{ns, name} {
		if !partRE.MatchString(p) || strings.Contains(p, "--") || strings.Contains(p, "..") ||
			strings.HasSuffix(p, ".git") || strings.HasSuffix(p, ".") || strings.HasSuffix(p, "-") {
			return fmt.Errorf("%w: repository id %q: %q must be 1-96 of [A-Za-z0-9._-], start with a letter or digit, no '--' or '..'", ErrInvalid, id, p)
		}
	}
	return nil
}

// MaxPathLen bounds a path in a repository (bytes).
const MaxPathLen = 1024

// CheckPath validates a path in a repository: relative, '/'-separated, valid UTF-8 without
// control characters or backslashes, no empty, "." or ".." segment, no ".git" segment.
func CheckPath(p string) error {
	bad := func(why string) error { return fmt.Errorf("%w: path %q %s", ErrInvalid, p, why) }
	switch {
	case p == "":
		return bad("is empty")
	case len(p) > MaxPathLen:
		return bad(fmt.Sprintf("is longer than %d bytes", MaxPathLen))
	case !utf8.ValidString(p):
		return bad("is not valid UTF-8")
	case strings.HasPrefix(p, "/"):
		return bad("is absolute")
	case strings.ContainsRune(p, '\\'):
		return bad("contains a backslash")
	}
	for _, r := range p {
		if r < 0x20 || r == 0x7f {
			return bad("contains a control character")
		}
	}
	for _, seg := range strings.Split(p, "/") {
		switch seg {
		case "":
			return bad("has an empty segment")
		case ".", "..":
			return bad("has a '.' or '..' segment")
		case ".git":
			return bad("has a '.git' segment")
		}
	}
	return nil
}

// CheckRefName validates a branch or tag name: a path-like name without "..", control
// characters or spaces, not 40 hex digits (that is a commit id).
func CheckRefName(n string) error {
	if err := CheckPath(n); err != nil || strings.ContainsAny(n, " ~^:?*[") || commitRE.MatchString(n) ||
		strings.HasSuffix(n, ".lock") || len(n) > 255 {
		return fmt.Errorf("%w: %q is not a valid branch or tag name", ErrInvalid, n)
	}
	return nil
}

var commitRE = regexp.MustCompile(`^[0-9a-f]{40}$`)

// IsCommitID reports whether s has the form of a commit id (40 lower-case hex digits).
func IsCommitID(s string) bool { return commitRE.MatchString(s) }

// Entry is one file of a commit's tree.
type Entry struct {
	Path   string `json:"path"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`        // of the content, hex
	Xet    string `json:"xet,omitempty"` // Xet file hash, hex; empty = a regular blob (BlobKey)
	// OID is the git blob id as the Hub reports it: git's sha1 of the content for a regular
	// file, of the LFS pointer for a Xet (LFS) file.
	OID string `json:"oid"`
}

// RemoteOID is what the pre-upload answer calls "oid": the sha256 of an LFS file, the git
// blob id of a regular one (huggingface_hub compares it with its local oid to skip uploads).
func (e Entry) RemoteOID() string {
	if e.Xet != "" {
		return e.SHA256
	}
	return e.OID
}

// lfsPointer is the git-lfs pointer file of content with sha256 sha and size n.
func lfsPointer(sha string, n int64) []byte {
	return fmt.Appendf(nil, "version https://git-lfs.github.com/spec/v1\noid sha256:%s\nsize %d\n", sha, n)
}

// PointerSize is the size of an LFS pointer file for a file of size n.
func PointerSize(sha string, n int64) int { return len(lfsPointer(sha, n)) }

// GitBlobID is git's blob id of content.
func GitBlobID(content []byte) string {
	h := sha1.New()
	fmt.Fprintf(h, "blob %d\x00", len(content))
	h.Write(content)
	return hex.EncodeToString(h.Sum(nil))
}

// Commit is an immutable commit: a whole tree sorted by path, its parent ("" for the first)
// and metadata.
type Commit struct {
	ID      string  `json:"-"`
	Parent  string  `json:"parent"`
	Message string  `json:"message"`
	Author  string  `json:"author"`
	At      int64   `json:"at"` // unix seconds
	Tree    []Entry `json:"tree"`
}

// Time is At as a time.
func (c *Commit) Time() time.Time { return time.Unix(c.At, 0).UTC() }

// Lookup finds path in the tree (sorted by path).
func (c *Commit) Lookup(path string) (Entry, bool) {
	i, ok := slices.BinarySearchFunc(c.Tree, path, func(e Entry, p string) int { return strings.Compare(e.Path, p) })
	if !ok {
		return Entry{}, false
	}
	return c.Tree[i], true
}

// computeID sets c.ID: the first 40 hex digits of the sha256 of the commit's JSON (parent,
// metadata, tree), so equal ids mean equal commits.
func computeID(body []byte) string {
	s := sha256.Sum256(body)
	return hex.EncodeToString(s[:20])
}

// BlobKey is the object-store key of a regular (small) file's content.
func BlobKey(sha string) string { return "hub/blobs/" + sha }
